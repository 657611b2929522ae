"""RBAC from the code: in every overlay, each ServiceAccount is granted exactly the requests the gputide commands
running under it make (tests/deploy/api_calls.py reads them from balancer/ and exporters/), no fewer (a 403 at
run time) and no more (a right nothing uses is one an attacker with the token gets for free)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from api_calls import requests_of, requests_of_command, requests_of_container, to_rbac
from test_deploy_manifests import OVERLAYS, render

from balancer.actuate.k8s_deploy_record import RECORD_NAME
from balancer.cli import build_parser
from balancer.telemetry.shard import parse_selector

NAMESPACE = "gputide"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet")


def _gputide_command(container: dict) -> str | None:
    image = container.get("image", "").split("/")[-1]
    return container["args"][0].replace("-", "_") if "gputide" in image and container.get("args") else None


def _holds_token(pod: dict, container: dict, service_accounts: dict[str, dict]) -> bool:
    mounted = any(m["mountPath"].rstrip("/") == TOKEN_PATH for m in container.get("volumeMounts", ()))
    sa = service_accounts.get(pod.get("serviceAccountName", "default"), {})
    automount = pod.get("automountServiceAccountToken", sa.get("automountServiceAccountToken", True))
    return automount or mounted


def needs(overlay: str) -> dict[str, set]:
    """{ServiceAccount: the requests of the gputide commands that run under it holding its token}, each command as its
    arguments run it (a right only a flag's code uses is needed only where the flag is given)."""
    rendered = render(overlay)
    service_accounts = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "ServiceAccount"}
    out: dict[str, set] = {}
    for obj in (o for o in rendered if o["kind"] in WORKLOADS):
        pod = obj["spec"]["template"]["spec"]
        for container in pod["containers"]:
            command = _gputide_command(container)
            if command is None:
                continue
            wanted = requests_of_container(command, build_parser().parse_args(container["args"]))
            if _holds_token(pod, container, service_accounts):
                out.setdefault(pod.get("serviceAccountName", "default"), set()).update(wanted)
            else:   # no token, no credentials: any request it makes fails
                assert not wanted, f"{overlay}: {obj['metadata']['name']}/{container['name']} has no API token"
    return out


def leases_of(rendered: tuple[dict, ...] | list[dict]) -> dict[str, set[str]]:
    """{ServiceAccount: the Leases its gputide commands elect on}: --lease-name, or a shard's <lease-name>-NAME, as
    `gputide run --shard` names it (balancer.telemetry.shard)."""
    out: dict[str, set[str]] = {}
    for obj in (o for o in rendered if o["kind"] in WORKLOADS):
        pod = obj["spec"]["template"]["spec"]
        for container in pod["containers"]:
            if _gputide_command(container) is None:
                continue
            args = build_parser().parse_args(container["args"])
            if not getattr(args, "leader_elect", False):
                continue
            name = args.lease_name
            if getattr(args, "shard", None):
                name = parse_selector(args.shard, args.selector).lease_name(name)
            out.setdefault(pod.get("serviceAccountName", "default"), set()).add(name)
    return out


def _names_allowed(rule: dict, own_leases: set[str]) -> bool:
    """Named objects only for the record of the operator's Deployment counts (test_deploy_rbac_scope.py) and, for
    leases, exactly the Leases the account's own commands elect on (test_deploy_rbac_leases.py): a Role still naming
    a Lease its --lease-name no longer passes would 403 its leader election."""
    names = rule.get("resourceNames")
    if names is None:
        return True
    if rule["resources"] == ["configmaps"]:
        return names == [RECORD_NAME]
    return rule["resources"] == ["leases"] and bool(names) and set(names) == own_leases


NAMELESS = {"create", "list", "watch", "deletecollection"}   # requests RBAC's resourceNames never match


def granted(overlay: str) -> dict[str, dict[tuple[str, str, str], set[str]]]:
    """{ServiceAccount: {(group, resource, verb): where ("*" cluster-wide, else the namespace)}}."""
    return granted_in(render(overlay))


def bound_rules(rendered: tuple[dict, ...] | list[dict]) -> Iterator[tuple[str, str, dict]]:
    """(ServiceAccount, where: "*" cluster-wide else the binding's namespace, rule) for every rule of every role a
    binding grants, as the API server's RBAC authorizer walks them: binding, roleRef, rules."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in rendered if o["kind"] in ("ClusterRole", "Role")}
    for binding in (o for o in rendered if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        ref = binding["roleRef"]
        where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else "*"
        role = roles[(ref["kind"], None if ref["kind"] == "ClusterRole" else where, ref["name"])]
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject["namespace"] == NAMESPACE, subject
            for rule in role["rules"]:
                yield subject["name"], where, rule


def granted_in(rendered: tuple[dict, ...] | list[dict]) -> dict[str, dict[tuple[str, str, str], set[str]]]:
    """`granted` of rendered objects. A rule that names its objects grants none of the requests that carry no
    name (`NAMELESS`: a create's name is in its body, not its path)."""
    leases = leases_of(rendered)
    out: dict[str, dict] = {}
    for account, where, rule in bound_rules(rendered):
        rights = out.setdefault(account, {})
        assert not rule.get("nonResourceURLs"), rule
        own = sorted(leases.get(account, ()))
        assert _names_allowed(rule, set(own)), \
            f"{account}: a rule names {rule['resources']} {rule.get('resourceNames')}, its commands elect on {own}"
        verbs = [v for v in rule["verbs"] if not (rule.get("resourceNames") and v in NAMELESS)]
        for triple in itertools.product(rule["apiGroups"], rule["resources"], verbs):
            rights.setdefault(triple, set()).add(where)
    return out


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_service_account_holds_every_right_its_code_needs(overlay):
    rights = granted(overlay)
    for sa, wanted in needs(overlay).items():
        missing = wanted - set(rights.get(sa, {}))
        assert not missing, f"{overlay}: {sa} would get 403 for {sorted(missing)}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_service_account_holds_a_right_its_own_code_does_not_use(overlay):
    """Per ServiceAccount, not over all of gputide: the controller's token must not bind pods because the
    scheduler does (which once ran as the controller's ServiceAccount, so the base granted pods/binding, pods/status
    and claim patches to a controller that never uses them, and the scheduler could scale Deployments and Jobs)."""
    wanted = needs(overlay)
    for sa, rights in granted(overlay).items():
        unused = set(rights) - wanted.get(sa, set())
        assert not unused, f"{overlay}: {sa} is granted {sorted(unused)}, which no gputide code running as it requests"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_leases_are_granted_in_gputides_namespace_only_and_nothing_is_a_wildcard(overlay):
    for sa, rights in granted(overlay).items():
        for (group, resource, verb), where in rights.items():
            assert "*" not in (group, resource, verb) and "secret" not in resource
            if resource == "leases":   # leader election: the Lease in the pod's own namespace
                assert where == {NAMESPACE}, (sa, resource, verb, where)


# ---- the reading of the code itself ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("http", "path", "params", "expected"),
    [
        ("POST", "/api/v1/namespaces/{namespace}/pods/{name}/eviction", {}, ("", "pods/eviction", "create")),
        ("GET", "/api/v1/namespaces", {}, ("", "namespaces", "list")),
        ("GET", "/api/v1/namespaces/{name}", {}, ("", "namespaces", "get")),
        ("PATCH", "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale", {},
         ("apps", "deployments/scale", "patch")),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", {},
         ("coordination.k8s.io", "leases", "update")),
        ("GET", "/apis/{group}/{version}/namespaces/{namespace}/{plural}", {"group": "kueue.x-k8s.io",
                                                                            "plural": "workloads"},
         ("kueue.x-k8s.io", "workloads", "list")),
        ("DELETE", "/api/v1/namespaces/{namespace}/pods", {}, ("", "pods", "deletecollection")),
    ],
)
def test_a_client_request_is_named_as_rbac_names_it(http, path, params, expected):
    assert to_rbac(http, path, params) == expected


def test_the_code_reading_finds_what_each_command_is_known_to_do():
    controller, scheduler = requests_of_command("run"), requests_of_command("schedule")
    assert {("", "pods/eviction", "create"), ("", "nodes", "patch"), ("apps", "deployments/scale", "patch"),
            ("kueue.x-k8s.io", "clusterqueues", "patch"), ("coordination.k8s.io", "leases", "update"),
            ("batch", "jobs", "watch")} <= controller   # watched through KubernetesWorkloads' ListCache
    assert {("", "pods/binding", "create"), ("", "pods/status", "patch"),
            ("", "persistentvolumeclaims", "watch")} <= scheduler   # watched through a helper, k8s_volumes' cache
    assert ("", "pods/binding", "create") not in controller   # only `gputide schedule` builds the scheduler
    assert requests_of_command("power_cap_agent") == {("", "nodes", "get")}
    assert requests_of_command("exporter") == set()
    # the gateway counts by the methods used on it: update_node reads and patches a node
    assert requests_of("balancer.actuate.kubernetes._Api.update_node") == {("", "nodes", "get"), ("", "nodes", "patch")}
