"""`gputide hand-over-floors` (balancer/cmd/hand_over_floors.py) works out the namespace a `gputide run` with no
POD_NAMESPACE elects in from the mounts over /var/run/secrets/kubernetes.io/serviceaccount/namespace, and in the
shipped image /var/run is a symlink to /run. A mount at /var hides that symlink, but a hostPath of the host's own /var
mounted there does not: it shows the host's /var/run, on a systemd host the same symlink to /run, which the runtime
and the controller follow inside the container. It was taken for hiding it, so a ConfigMap at
/run/secrets/kubernetes.io/serviceaccount beside the admission plugin's token was over no file, the controller taken
for its Deployment's namespace's alone, and a hand-over of the Lease the ConfigMap's namespace names went ahead under
it. An emptyDir at /var, a hostPath of another folder there (the host's / at /var shows its /run folder), or one with
a subPath to another folder still hides it; the host's / with subPath var at /var is its own /var, and one with a
subPathExpr (expanded on the node) may be."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from balancer.cmd.hand_over_floors import controller_writers

ROOT = Path(__file__).resolve().parents[2]
RUN_SA = "/run/secrets/kubernetes.io/serviceaccount"   # /var/run/... through the symlink to /run
ODD = {"name": "odd", "configMap": {"name": "odd"}}   # its namespace key, if any, cannot be told here
ANY = ("$(namespace file)/gputide-controller",)
OWN = ("team-b/gputide-controller",)   # the plugin's token, the pod's own namespace


def controller(*mounts: tuple[dict, str, str | None]) -> dict:
    """The shipped controller's Deployment (deploy/base/controller.yaml) in team-b, with no --lease-namespace and no
    POD_NAMESPACE (it elects in the namespace its service-account namespace file names), the token mounted by the
    admission plugin, and each (volume, mountPath, subPath) mounted in its container."""
    dep = next(d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "controller.yaml").read_text())
               if d and d["kind"] == "Deployment")
    dep["metadata"].update(name="east", namespace="team-b")
    pod = dep["spec"]["template"]["spec"]
    pod["automountServiceAccountToken"] = True
    container = pod["containers"][0]
    container["args"] = [a for a in container["args"] if not a.startswith("--lease-namespace")]
    container["env"] = [v for v in container.get("env", []) if v.get("name") != "POD_NAMESPACE"]
    container.pop("envFrom", None)
    for volume, path, sub in mounts:
        pod["volumes"] = [*pod.get("volumes", []), copy.deepcopy(volume)]
        container["volumeMounts"] = [*container.get("volumeMounts", []), {
            "name": volume["name"], "mountPath": path, **({"subPath": sub} if sub else {})}]
    return dep


def writers(dep: dict) -> tuple[tuple[str, ...], str]:
    (elects,) = controller_writers(dep)
    return elects.writers, elects.why


@pytest.mark.parametrize("host, at", [("/var", "/var"), ("//var/", "/var/"), ("/", "/")],
                         ids=["var", "var-unclean", "root"])
def test_a_hostpath_of_the_hosts_own_var_keeps_run_over_the_namespace_file(host, at):
    shown = {"name": "host", "hostPath": {"path": host}}
    told, why = writers(controller((shown, at, None), (ODD, RUN_SA, None)))
    assert told == ANY and f"its volume odd (configMap) mounted over it at {RUN_SA} may put any namespace" in why, why
    # what still hides the symlink: the token's namespace, the pod's own, is read (as before)
    for hides in ((shown, at, "x"),   # a subPath: another folder of the host's
                  ({"name": "host", "hostPath": {"path": "/srv" + host}}, at, None),
                  ({"name": "host", "hostPath": {"path": "/"}}, "/var", None),   # the host's /run folder at /var/run
                  ({"name": "host", "emptyDir": {}}, at, None)):
        assert writers(controller(hides, (ODD, RUN_SA, None))) == (OWN, ""), hides
    # a hostPath of /var elsewhere (/host/var, its run the host's /run) is no mount at /var: the image's symlink
    # stays, and the ConfigMap at /run is over the file, as it is without it
    elsewhere = ({"name": "host", "hostPath": {"path": host}}, "/host/var", None)
    assert writers(controller(elsewhere, (ODD, RUN_SA, None)))[0] == ANY == writers(controller((ODD, RUN_SA, None)))[0]
    if at == "/":   # the host's own / with an emptyDir at /var, deeper, mounted over it: hidden
        assert writers(controller((shown, at, None), ({"name": "var", "emptyDir": {}}, "/var", None),
                                  (ODD, RUN_SA, None))) == (OWN, "")


@pytest.mark.parametrize("host, sub", [("/", "var"), ("/", "./var/"), ("//", "var")],
                         ids=["root-sub-var", "root-sub-unclean", "root-unclean"])
def test_a_hostpath_whose_subpath_is_the_hosts_own_var_keeps_run_over_the_namespace_file(host, sub):
    """The host's / with subPath var mounted at /var is the host's own /var (its /var/run the symlink to /run): it
    was taken for hiding the image's symlink, the ConfigMap at /run over no file, and the hand-over went ahead."""
    mount = ({"name": "host", "hostPath": {"path": host}}, "/var", sub)
    told, why = writers(controller(mount, (ODD, RUN_SA, None)))
    assert told == ANY and f"its volume odd (configMap) mounted over it at {RUN_SA} may put any namespace" in why, why
    # another folder of the host's at /var through its subPath still hides it
    for other in ("srv", "var/x", "run"):
        assert writers(controller((mount[0], "/var", other), (ODD, RUN_SA, None))) == (OWN, ""), other


def _with_sub_path_expr(dep: dict, expr: str) -> dict:
    """`dep` with its container's mount of the volume host given `expr` as its subPathExpr."""
    (mount,) = [m for m in dep["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] if m["name"] == "host"]
    mount["subPathExpr"] = expr
    return dep


@pytest.mark.parametrize("host, at", [("/", "/var"), ("/var", "/var"), ("/", "/")], ids=["root", "var", "root-at-root"])
def test_a_hostpath_with_a_subpathexpr_may_be_the_hosts_own_var(host, at):
    """A subPathExpr is expanded on the node from the container's env ($(NODE_DIR): var, or any other): from a host
    folder at or above the mount's path, it may be the host's own, so both views are judged (a refusal)."""
    dep = _with_sub_path_expr(controller(({"name": "host", "hostPath": {"path": host}}, at, None),
                                         (ODD, RUN_SA, None)), "$(NODE_DIR)")
    assert writers(dep)[0] == ANY
    # from a host folder beside it, no expansion reaches the host's /var (the kubelet refuses a '..' in it): hidden
    dep = _with_sub_path_expr(controller(({"name": "host", "hostPath": {"path": "/srv"}}, "/var", None),
                                         (ODD, RUN_SA, None)), "$(NODE_DIR)")
    assert writers(dep) == (OWN, "")
