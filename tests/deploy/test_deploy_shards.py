"""overlays/sharded: two controller shards, each a Deployment of the base controller with its own --shard and
--selector, electing on its own Lease (`gputide-controller-NAME`, balancer.telemetry.shard.ShardSelector.lease_name).
Before it, a sharded controller was the operator's to build, and the leader-election Role named `gputide-controller`
alone: each shard's first election was refused (403) until the operator added its Lease by hand (audit s33h4). The
overlay's Role names exactly the shards' Leases; the shards' pods, budgets and spreads are told apart by the label
gputide.io/controller-shard, so two Deployments never fight over one another's pods.

Each shard is the base controller's Deployment and PodDisruptionBudget whole but for its shard (audit s33a6: shard b
was given the base's pod spec alone, so a strategy, a revisionHistoryLimit, a template annotation or a budget's
setting of the base reached shard a only, as did an operator's patch of gputide-controller on top of the overlay)."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from test_deploy_manifests import ROOT, one, render, render_over
from test_deploy_rbac import granted_in, leases_of
from test_deploy_rbac_leases import lease_reach

from balancer.cli import build_parser
from balancer.model import Node
from balancer.telemetry.shard import parse_selector

OVERLAY = "overlays/sharded"
SHARDS = {"gputide-controller-a": "a", "gputide-controller-b": "b"}   # Deployment and budget: shard
LABEL = "gputide.io/controller-shard"


def _controllers(rendered=None) -> dict[str, dict]:
    rendered = render(OVERLAY) if rendered is None else rendered
    return {d["metadata"]["name"]: d for d in rendered if d["kind"] == "Deployment" and d["metadata"]["name"] in SHARDS}


def _budgets(rendered) -> dict[str, dict]:
    return {b["metadata"]["name"]: b for b in rendered if b["kind"] == "PodDisruptionBudget"
            and "gputide-controller" in b["metadata"]["name"]}


def _args(deployment: dict):
    return build_parser().parse_args(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def pod_selectors(pod: dict) -> list[dict]:
    """The matchLabels of every spread constraint and every anti-affinity term of a pod spec (each, not the first
    alone: a second constraint the overlay left without the shard's label selects every shard's pods)."""
    anti = (pod.get("affinity") or {}).get("podAntiAffinity") or {}
    terms = [*(pod.get("topologySpreadConstraints") or ()),
             *anti.get("requiredDuringSchedulingIgnoredDuringExecution", ()),
             *(t["podAffinityTerm"] for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", ()))]
    return [t["labelSelector"]["matchLabels"] for t in terms]


def as_shard(base: dict, shard: str) -> dict:
    """The base controller's Deployment or PodDisruptionBudget as shard `shard`'s: its name, the shard label on it
    and in its selector; a Deployment's pods, every spread constraint and anti-affinity term too, and --shard and
    --selector after `run`."""
    out = copy.deepcopy(base)
    out["metadata"]["name"] = f"gputide-controller-{shard}"
    out["metadata"]["labels"][LABEL] = shard
    spec = out["spec"]
    spec["selector"]["matchLabels"][LABEL] = shard
    if out["kind"] == "Deployment":
        spec["template"]["metadata"]["labels"][LABEL] = shard
        pod = spec["template"]["spec"]
        for term in pod_selectors(pod):
            term[LABEL] = shard
        pod["containers"][0]["args"][1:1] = [f"--shard={shard}", f"--selector=gputide.io/shard={shard}"]
    return out


def assert_shards_are_the_base(rendered, base: dict, base_budget: dict) -> None:
    controllers, budgets = _controllers(rendered), _budgets(rendered)
    assert set(controllers) == set(budgets) == set(SHARDS), (sorted(controllers), sorted(budgets))
    for name, shard in SHARDS.items():
        assert controllers[name] == as_shard(base, shard), name
        assert budgets[name] == as_shard(base_budget, shard), name


def kustomize(path: Path) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with kustomize) not on PATH")
    out = subprocess.run([kubectl, "kustomize", str(path)], check=True, capture_output=True, text=True,
                         timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def sharded_over(tmp_path: Path, under: dict, of: str = "base") -> Path:
    """overlays/sharded copied as its comment says, its first resource an operator's kustomization `under` of
    `of` (the base, or one of our overlays) in place of ../../base."""
    (tmp_path / "under").mkdir()
    (tmp_path / "under" / "kustomization.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
         "resources": [os.path.relpath(ROOT / "deploy" / of, tmp_path / "under")], **under}))
    src, dst = ROOT / "deploy" / OVERLAY, tmp_path / "sharded"
    dst.mkdir()
    kustomization = yaml.safe_load((src / "kustomization.yaml").read_text())
    assert kustomization["resources"][0] == "../../base"
    kustomization["resources"][0] = "../under"
    kustomization["components"] = [os.path.relpath((src / c).resolve(), dst) for c in kustomization["components"]]
    (dst / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    for extra in kustomization["resources"][1:]:
        shutil.copy(src / extra, dst / extra)
    return dst


def test_the_role_grants_each_shards_lease_and_no_other():
    rendered = render(OVERLAY)
    leases = {f"gputide-controller-{s}" for s in SHARDS.values()}
    assert leases_of(rendered) == {"gputide-controller": leases}
    granted_in(rendered)   # the Role names exactly the Leases the args elect on
    for verb in ("get", "update"):
        assert lease_reach(rendered, verb)["gputide-controller"] == leases, verb


def test_a_shard_the_role_forgets_is_caught():
    rendered = copy.deepcopy(list(render(OVERLAY)))
    (role,) = [o for o in rendered if o["kind"] == "Role" and o["metadata"]["name"] == "gputide-leader-election"]
    role["rules"][0]["resourceNames"].remove("gputide-controller-b")
    with pytest.raises(AssertionError, match=r"elect on \['gputide-controller-a', 'gputide-controller-b'\]"):
        granted_in(rendered)


def test_each_shard_acts_on_its_own_nodes_alone():
    controllers = _controllers()
    assert set(controllers) == set(SHARDS)
    selectors = {SHARDS[name]: parse_selector(a.shard, a.selector) for name, d in controllers.items()
                 for a in [_args(d)]}
    assert {name: s.name for name, s in selectors.items()} == {s: s for s in SHARDS.values()}
    for shard in SHARDS.values():
        node = Node(name=f"gpu-{shard}", gpu_model="H100-SXM", gpu_count=8, labels={"gputide.io/shard": shard})
        assert [s for s, sel in selectors.items() if sel.matches(node)] == [shard]
    assert not any(sel.matches(Node(name="gpu-none", gpu_model="H100-SXM", gpu_count=8)) for sel in selectors.values())


def test_each_shard_is_the_base_controller_but_for_its_shard():
    """Whole Deployments and budgets (components/controller-shards): a change to the base's strategy, probes, grace
    period, volumes or budget reaches every shard, and the unsharded controller's own Deployment and budget are not
    rendered beside them."""
    assert_shards_are_the_base(render(OVERLAY), one("base", "Deployment", "gputide-controller"),
                               one("base", "PodDisruptionBudget", "gputide-controller"))
    assert not [o for o in render(OVERLAY) if o["kind"] in ("Deployment", "PodDisruptionBudget")
                and o["metadata"]["name"] == "gputide-controller"]


def test_a_change_to_the_controller_under_the_sharding_reaches_every_shard(tmp_path):
    """What the overlay's comment tells an operator to do with the controller's settings (its --prometheus, and what
    the base does not set today): patch gputide-controller in a kustomization under a copy of the overlay. Shard b
    once got the pod spec alone: no strategy, revisionHistoryLimit, template annotation nor budget setting."""
    under = {"patches": [
        {"target": {"kind": "Deployment", "name": "gputide-controller"}, "patch": yaml.safe_dump([
            {"op": "add", "path": "/spec/strategy", "value": {"type": "RollingUpdate",
                                                              "rollingUpdate": {"maxUnavailable": 0}}},
            {"op": "add", "path": "/spec/revisionHistoryLimit", "value": 3},
            {"op": "add", "path": "/spec/minReadySeconds", "value": 5},
            {"op": "add", "path": "/spec/template/metadata/annotations", "value": {"example.com/scrape": "yes"}},
            {"op": "replace", "path": "/spec/template/spec/containers/0/args/5",
             "value": "--prometheus=http://thanos.monitoring.svc:9090"}])},
        {"target": {"kind": "PodDisruptionBudget", "name": "gputide-controller"}, "patch": yaml.safe_dump([
            {"op": "remove", "path": "/spec/minAvailable"},
            {"op": "add", "path": "/spec/maxUnavailable", "value": 1}])}]}
    path = sharded_over(tmp_path, under)
    rendered = kustomize(path)
    base = {(o["kind"], o["metadata"]["name"]): o for o in kustomize(tmp_path / "under")}
    assert base["Deployment", "gputide-controller"]["spec"]["revisionHistoryLimit"] == 3   # the patch took
    assert_shards_are_the_base(rendered, base["Deployment", "gputide-controller"],
                               base["PodDisruptionBudget", "gputide-controller"])
    for deployment in _controllers(rendered).values():
        assert _args(deployment).prometheus == "http://thanos.monitoring.svc:9090"


def test_overlays_capacity_under_the_sharding_reaches_every_shard(tmp_path):
    """The comment's example of an overlay to shard: its --services, volume and mount reach both shards."""
    rendered = kustomize(sharded_over(tmp_path, {}, of="overlays/capacity"))
    assert_shards_are_the_base(rendered, one("overlays/capacity", "Deployment", "gputide-controller"),
                               one("overlays/capacity", "PodDisruptionBudget", "gputide-controller"))
    assert all(_args(d).services for d in _controllers(rendered).values())


def assert_no_selector_takes_another_shards_pods(rendered) -> None:
    controllers = _controllers(rendered)
    budgets = {b["metadata"]["name"]: b["spec"]["selector"]["matchLabels"] for b in rendered
               if b["kind"] == "PodDisruptionBudget"}
    for name, deployment in controllers.items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        spreads = pod_selectors(deployment["spec"]["template"]["spec"])
        assert len(spreads) >= 2, name   # a spread constraint and an anti-affinity term at least
        for selector in (deployment["spec"]["selector"]["matchLabels"], *spreads):
            takes = [other for other, d in controllers.items()
                     if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()]
            assert takes == [name], (name, selector)
        # one budget alone: the Eviction API refuses to evict a pod that more than one selects
        assert [b for b, sel in budgets.items() if sel.items() <= labels.items()] == [name]


def test_no_shards_selector_budget_or_spread_takes_another_shards_pods():
    assert_no_selector_takes_another_shards_pods(render(OVERLAY))


def test_a_spread_constraint_the_overlay_leaves_unlabelled_is_caught(tmp_path):
    """Every constraint is read (audit s33a12: the first alone was): a base that gains a second spread constraint
    gets the shard's label on the first only (the overlay's patches name /0), so the second spreads every shard's
    pods together."""
    second = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
              "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "gputide-controller"}}}
    under = {"patches": [{"target": {"kind": "Deployment", "name": "gputide-controller"}, "patch": yaml.safe_dump([
        {"op": "add", "path": "/spec/template/spec/topologySpreadConstraints/-", "value": second}])}]}
    rendered = kustomize(sharded_over(tmp_path, under))
    base = {(o["kind"], o["metadata"]["name"]): o for o in kustomize(tmp_path / "under")}
    with pytest.raises(AssertionError, match="gputide-controller-a"):
        assert_no_selector_takes_another_shards_pods(rendered)
    with pytest.raises(AssertionError, match="gputide-controller-a"):
        assert_shards_are_the_base(rendered, base["Deployment", "gputide-controller"],
                                   base["PodDisruptionBudget", "gputide-controller"])


def test_annotations_reach_the_shards_on_top_by_label_not_under_the_sharding(tmp_path):
    """What the comment says of metadata.annotations (audit s33a12: it said a patch of gputide-controller under the
    sharding reached both shards, which is true of its spec and labels alone; copy.yaml says why)."""
    note = {"example.com/owner": "ml-platform"}
    under = {"patches": [{"target": {"kind": "Deployment", "name": "gputide-controller"}, "patch": yaml.safe_dump([
        {"op": "add", "path": "/metadata/annotations", "value": note}])}]}
    (tmp_path / "below").mkdir()
    below = _controllers(kustomize(sharded_over(tmp_path / "below", under)))
    assert set(below) == set(SHARDS) and not any(d["metadata"].get("annotations") for d in below.values())
    (tmp_path / "on-top").mkdir()
    on_top = _controllers(render_over(tmp_path / "on-top", OVERLAY, patches=[{
        "target": {"kind": "Deployment", "labelSelector": LABEL}, "patch": yaml.safe_dump([
            {"op": "add", "path": "/metadata/annotations", "value": note}])}]))
    assert {name: d["metadata"].get("annotations") for name, d in on_top.items()} == {name: note for name in SHARDS}
    text = " ".join(line.lstrip("# ").strip() for line in (ROOT / "deploy" / OVERLAY / "kustomization.yaml")
                    .read_text().splitlines() if line.startswith("#"))
    assert "both shards get its spec and its labels, not its metadata.annotations" in text
    assert "and both shards get it." not in text
