"""overlays/sharded installed for real (audit s33a6): over an unsharded install, with an operator's patch on top, on
nodes no shard takes, and read from Prometheus. Each case checks the rendered objects against what the overlay's
comment tells the operator, so the two cannot part.

Shard a once kept the name gputide-controller with a selector gaining gputide.io/controller-shard: a Deployment's
selector cannot change, so `kubectl apply` failed on it after the Role update had landed and the running controller
lost its Lease. The shards now have names of their own and the unsharded controller is not rendered: what an apply
leaves behind, the comment deletes first."""

from __future__ import annotations

import re
import subprocess

import pytest
from prometheus_client import CollectorRegistry
from test_deploy_manifests import ROOT, render, render_over
from test_deploy_shards import OVERLAY, SHARDS, _args, _controllers

from balancer.metrics import ControllerMetrics
from balancer.model import Node
from balancer.telemetry.shard import parse_selector

# fields Kubernetes refuses to change in place (an apply fails on the object): a Deployment's selector
# (kubernetes#50808), a binding's roleRef, ...
IMMUTABLE = {"Deployment": ("spec", "selector"), "DaemonSet": ("spec", "selector"),
             "StatefulSet": ("spec", "selector"), "RoleBinding": ("roleRef",), "ClusterRoleBinding": ("roleRef",)}
DELETE = re.compile(r"kubectl -n gputide delete (\w+)/(\S+)")


def comment() -> str:
    text = (ROOT / "deploy" / OVERLAY / "kustomization.yaml").read_text()
    return "\n".join(line[1:].strip() for line in text.splitlines() if line.startswith("#"))


def _ids(rendered) -> dict[tuple[str, str, str | None], dict]:
    return {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")): o for o in rendered}


def _field(obj: dict, path: tuple[str, ...]):
    for key in path:
        obj = (obj or {}).get(key)
    return obj


def test_applying_the_sharded_overlay_over_an_unsharded_install_changes_no_immutable_field():
    installed, sharded = _ids(render("base")), _ids(render(OVERLAY))
    for key in installed.keys() & sharded.keys():
        path = IMMUTABLE.get(key[0])
        if path:
            assert _field(installed[key], path) == _field(sharded[key], path), (key, ".".join(path))


def test_what_an_apply_leaves_of_the_unsharded_install_is_what_the_comment_deletes_first():
    """`kubectl apply -k` deletes nothing: the unsharded controller would go on beside the shards (on a Lease the
    Role no longer grants) and its budget select every shard's pod, which the Eviction API then refuses to evict."""
    kinds = {"deployment": "Deployment", "poddisruptionbudget": "PodDisruptionBudget"}
    left = {(kind, name) for kind, name, _ in _ids(render("base")).keys() - _ids(render(OVERLAY)).keys()}
    assert left == {("Deployment", "gputide-controller"), ("PodDisruptionBudget", "gputide-controller")}
    text = comment()
    assert {(kinds[k], n) for k, n in DELETE.findall(text)} == left
    assert text.index("delete deployment/gputide-controller --cascade=foreground") < text.index("kubectl apply -k")
    leftover_budget = _ids(render("base"))["PodDisruptionBudget", "gputide-controller", "gputide"]
    for deployment in _controllers().values():   # why the budget goes too
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert leftover_budget["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_an_operators_patch_on_top_reaches_both_shards_or_fails_the_build(tmp_path):
    """The comment's way to patch on top: select the shards by label. A patch naming gputide-controller, which once
    reached shard a alone, now fails the build."""
    url = "http://thanos.monitoring.svc:9090"
    index = next(i for i, a in enumerate(_controllers()["gputide-controller-a"]["spec"]["template"]["spec"][
        "containers"][0]["args"]) if a.startswith("--prometheus="))
    text = comment()
    assert "labelSelector: gputide.io/controller-shard" in text and f"args/{index}, value: --prometheus=" in text
    (tmp_path / "on-top").mkdir()
    patched = render_over(tmp_path / "on-top", OVERLAY, patches=[{
        "target": {"kind": "Deployment", "labelSelector": "gputide.io/controller-shard"},
        "patch": f"- op: replace\n  path: /spec/template/spec/containers/0/args/{index}\n"
                 f"  value: --prometheus={url}\n"}])
    controllers = _controllers(patched)
    assert set(controllers) == set(SHARDS)
    assert {name: _args(d).prometheus for name, d in controllers.items()} == {name: url for name in SHARDS}
    assert {name: _args(d).shard for name, d in controllers.items()} == SHARDS
    (tmp_path / "by-name").mkdir()
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render_over(tmp_path / "by-name", OVERLAY, patches=[{"patch": (
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: gputide-controller\n  namespace: gputide\n"
            "spec:\n  replicas: 3\n")}])
    assert "no resource matches" in failed.value.stderr


def _kubectl_selects(selector: str, labels: dict[str, str]) -> bool:
    """A node list's -l as kubectl reads it, for the two forms the comment uses: key=value, key notin (v,...) (true
    also where the node lacks the key)."""
    for term in re.split(r",(?![^(]*\))", selector):
        if m := re.fullmatch(r"\s*(\S+)\s+notin\s+\(([^)]*)\)\s*", term):
            if labels.get(m[1]) in {v.strip() for v in m[2].split(",")}:
                return False
        else:
            key, value = term.split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
    return True


def test_the_comments_command_lists_exactly_the_gpu_nodes_no_shard_takes():
    """Every shard knows its own selector alone: a GPU node labelled with no shard, or a shard that does not run,
    is balanced by none and nothing says so (balancer/telemetry/shard.py neither logs nor exports it). The overlay's
    comment gives the command that lists them; a third shard left out of it would be listed as taken by none."""
    (command,) = re.findall(r"kubectl get nodes -l '([^']+)'", comment())
    selectors = [parse_selector(a.shard, a.selector) for a in map(_args, _controllers().values())]
    for value in (*SHARDS.values(), None, "", "A", "c", "a "):
        labels = {"nvidia.com/gpu.present": "true", **({"gputide.io/shard": value} if value is not None else {})}
        taken = any(s.matches(Node(name="gpu-1", gpu_model="H100-SXM", gpu_count=8, labels=labels)) for s in selectors)
        assert _kubectl_selects(command, labels) is not taken, value
    assert not _kubectl_selects(command, {"gputide.io/shard": "x"})   # a CPU node is no one's to balance


def test_the_comment_names_the_only_series_that_carry_the_shards_lease():
    """The comment once said the controller's series carry lease=: only gputide_leader does (metrics.elect_on)."""
    registry = CollectorRegistry()
    ControllerMetrics(registry).elect_on("gputide-controller-a")
    with_lease = sorted({f.name for f in registry.collect() for s in f.samples if "lease" in s.labels}
                        | {c._name for c in registry._collector_to_names if "lease" in getattr(c, "_labelnames", ())})
    assert with_lease == ["gputide_leader"]
    with_shard = sorted(c._name for c in registry._collector_to_names if "shard" in getattr(c, "_labelnames", ()))
    assert with_shard == ["gputide_shard_node_info", "gputide_shard_nodes"]   # the shard's leader's own (749af3e0)
    text = " ".join(comment().split())
    assert ('gputide_leader carries lease="gputide-controller-NAME", and a shard\'s leader\'s gputide_shard_nodes and '
            'gputide_shard_node_info carry shard="NAME"; they are the only controller series') in text
    assert "series carry lease=" not in text
