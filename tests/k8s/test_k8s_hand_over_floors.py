"""`gputide hand-over-floors FROM TO` (balancer/cmd/hand_over_floors.py) against the fake API server: a controller
gives back only what names it as its writer (k8s_hpa.owned_by), and the unsharded controller's floors name
gputide/gputide-controller, which no shard is; after a switch to the shards (or back) a floor whose service later
left gputide's management stayed raised for good. The command renames the writer on FROM's HPA floors and
gputide-replicas entries, nothing else, at the resourceVersions read; read back here with the controller's own rules
(floor_restore_patch, floored_namespaces, to_give_back). It replaces deploy/overlays/sharded/hand-over-floors.sh,
whose test skipped without jq (the project's CI has none)."""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from fakeapi import FakeKube, deployment, hpa

from balancer.actuate import kubernetes as kube_mod
from balancer.actuate.k8s_deploy_record import Entry, entries, to_give_back
from balancer.actuate.k8s_hpa import (
    HPA_FLOOR_ANNOTATION,
    HPA_FLOOR_OWNER_ANNOTATION,
    HPA_OWN_MIN_ANNOTATION,
    floor_restore_patch,
    floored_namespaces,
)
from balancer.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy" / "overlays" / "sharded" / "kustomization.yaml"
OLD, SHARD_A, SHARD_B = "gputide/gputide-controller", "gputide/gputide-controller-a", "gputide/gputide-controller-b"
ELSEWHERE = "other/gputide-controller"   # another install's controller: the same Lease name, another namespace
HPAS, RECORD = "horizontalpodautoscalers", "gputide-replicas"
WRITES = ("PATCH", "PUT", "POST", "DELETE")


def floored(ns: str, name: str, owner: str | None, floor: int = 6, own: int = 2) -> dict:
    obj = hpa(name, name, ns, lo=floor, hi=10)
    obj["metadata"]["annotations"] = {HPA_OWN_MIN_ANNOTATION: str(own), HPA_FLOOR_ANNOTATION: str(floor),
                                      **({HPA_FLOOR_OWNER_ANNOTATION: owner} if owner else {})}
    return obj


def record(ns: str, data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": RECORD, "namespace": ns}, "data": data}


WRITTEN = (("chat", "llm", OLD), ("search", "embed", SHARD_B), ("web", "old", None), ("team", "bot", ELSEWHERE))


@pytest.fixture
def kube(monkeypatch):
    """What the unsharded controller left, a shard and another install wrote since: a floor and a record entry of
    each writer, one unnamed of each, an HPA gputide never floored, a hand-edited entry; the command's client is
    the fake's. (Not conftest's `kube`: the command runs with the operator's rights, not the controller's RBAC.)"""
    with FakeKube() as fake:
        client = fake.client()
        monkeypatch.setattr(kube_mod, "build_api_client", lambda kubeconfig=None: client)
        for ns, name, owner in WRITTEN:
            fake.add(floored(ns, name, owner))
        fake.add(hpa("plain", "plain", "web", lo=1, hi=4))
        data = {f"{ns}.{name}": Entry(2, 1, owner, ns, name).text() for ns, name, owner in WRITTEN}
        fake.add(record("gputide", {**data, "hand.edited": "{not json"}))
        fake.add(record("other", {"team.bot": Entry(2, 1, ELSEWHERE, "team", "bot").text()}))
        yield fake
        client.close()


def state(kube: FakeKube) -> dict:
    return copy.deepcopy({k: v for k, v in kube.objects.items() if k[0] in (HPAS, "configmaps")})


def hpas(kube: FakeKube) -> dict[str, dict]:
    return {name: obj for (plural, _, name), obj in kube.objects.items() if plural == HPAS}


def data(kube: FakeKube, ns: str = "gputide") -> dict[str, str]:
    return kube.get("configmaps", RECORD, ns)["data"]


def entry_owner(kube: FakeKube, key: str, ns: str = "gputide") -> str | None:
    return entries(kube.get("configmaps", RECORD, ns))[key].owner


def writes(kube: FakeKube) -> list:
    return [r for r in kube.requests if r.method in WRITES]


def hand_over(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["hand-over-floors", *argv])
    except SystemExit as exc:   # refused as the command line is read (`_args.given`)
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_shard_leaves_the_unsharded_controllers_floors_until_they_are_handed_over(kube, capsys):
    before = state(kube)
    left = f"floor set by {OLD}, not by {SHARD_A}: left to it"
    assert floor_restore_patch(hpas(kube)["llm"], SHARD_A) == (None, left)
    assert "chat.llm" not in to_give_back(entries(kube.get("configmaps", RECORD, "gputide")), None, (), SHARD_A)

    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 0, err
    assert out.splitlines() == [
        f"hpa chat/llm: floor handed from {OLD} to {SHARD_A}",
        f"configmap gputide/{RECORD} chat.llm: entry handed from {OLD} to {SHARD_A}",
        f"handed from {OLD} to {SHARD_A}: 1 HPA floor(s), 1 {RECORD} entry"]
    after = hpas(kube)
    # shard a now gives the floor back once its service leaves management: the operator's own 2, the record gone
    body, what = floor_restore_patch(after["llm"], SHARD_A)
    assert body == {"metadata": {"annotations": dict.fromkeys((HPA_OWN_MIN_ANNOTATION, HPA_FLOOR_ANNOTATION,
                                                               HPA_FLOOR_OWNER_ANNOTATION))},
                    "spec": {"minReplicas": 2}}, what
    assert floored_namespaces({"items": list(after.values())}, (), SHARD_A) == ("chat", "web")
    assert floored_namespaces({"items": list(after.values())}, ("llm",), SHARD_A) == ("web",)   # managed: kept
    # the floor itself as it was, only its writer renamed
    was = before[(HPAS, "chat", "llm")]
    assert after["llm"]["spec"] == was["spec"]
    assert after["llm"]["metadata"]["annotations"] == {**was["metadata"]["annotations"],
                                                       HPA_FLOOR_OWNER_ANNOTATION: SHARD_A}
    # every other HPA, and the other namespace's record, not written at all (same resourceVersion)
    for key in ((HPAS, "search", "embed"), (HPAS, "web", "old"), (HPAS, "team", "bot"), (HPAS, "web", "plain"),
                ("configmaps", "other", RECORD)):
        assert kube.objects[key] == before[key], key
    # the record: the old controller's entry is shard a's, the rest byte for byte as they were
    old, new = before[("configmaps", "gputide", RECORD)]["data"], data(kube)
    assert {k for k in new if new[k] != old[k]} == {"chat.llm"} and new.keys() == old.keys()
    recorded = entries(kube.get("configmaps", RECORD, "gputide"))
    assert recorded["chat.llm"] == Entry(2, 1, SHARD_A, "chat", "llm")
    assert to_give_back(recorded, None, (), SHARD_A) == ["chat.llm", "web.old"]
    assert to_give_back(recorded, None, (), SHARD_B) == ["search.embed", "web.old"]


def test_back_to_unsharded_both_shards_floors_are_handed_to_the_controller(kube, capsys):
    for shard in ("gputide-controller-a", "gputide-controller-b"):
        code, _, err = hand_over(capsys, shard, "gputide-controller")
        assert code == 0, err
    owners = {n: h["metadata"].get("annotations", {}).get(HPA_FLOOR_OWNER_ANNOTATION) for n, h in hpas(kube).items()}
    assert owners == {"llm": OLD, "embed": OLD, "old": None, "bot": ELSEWHERE, "plain": None}
    assert to_give_back(entries(kube.get("configmaps", RECORD, "gputide")), None, (), OLD) == [
        "chat.llm", "search.embed", "web.old"]


def test_another_namespaces_controller_of_the_same_lease_name_is_left_alone(kube, capsys):
    """--namespace picks whose: other/gputide-controller's floor and record change, gputide's stay."""
    before = state(kube)
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--namespace", "other")
    assert code == 0, err
    assert out.splitlines()[-1] == (f"handed from {ELSEWHERE} to other/gputide-controller-a: 1 HPA floor(s), "
                                    f"1 {RECORD} entry")
    assert hpas(kube)["bot"]["metadata"]["annotations"][HPA_FLOOR_OWNER_ANNOTATION] == "other/gputide-controller-a"
    assert entry_owner(kube, "team.bot", "other") == "other/gputide-controller-a"
    for key in ((HPAS, "chat", "llm"), ("configmaps", "gputide", RECORD)):
        assert kube.objects[key] == before[key], key


def controller(name: str, ns: str = "gputide", *flags: str) -> dict:
    """The base controller's Deployment (deploy/base/controller.yaml: its args and env as deployed) named `name` in
    `ns`, `flags` added last (a shard's --shard=a; a flag given twice counts the last, as argparse does)."""
    dep = next(d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "controller.yaml").read_text())
               if d and d["kind"] == "Deployment")
    dep["metadata"].update(name=name, namespace=ns)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["args"] = [*container["args"], *flags]
    return dep


def lease(name: str, holder: str, renewed_s_ago: float, ns: str = "gputide", duration: int = 90) -> dict:
    stamp = (datetime.now(UTC) - timedelta(seconds=renewed_s_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": ns},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": stamp,
                     "acquireTime": stamp}}


def test_refused_while_the_old_controller_runs_and_nothing_changes(kube, capsys):
    """A running controller writes its own name again at its next floor: the hand-over waits for its deletion."""
    kube.add(controller("gputide-controller"))
    before = state(kube)
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 1 and (f"deployment/gputide-controller in gputide runs a controller on Lease {OLD}: stop it "
                          "first") in err, err
    assert out == "" and state(kube) == before and not writes(kube)
    # its Lease is in its own namespace ($(POD_NAMESPACE)): not other's controller of that name
    code, _, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--namespace", "other")
    assert code == 0, err


def test_a_controller_is_found_by_its_lease_not_by_its_name(kube, capsys):
    """What ties a Deployment to the Lease is its `gputide run` args (--lease-name, --shard, --lease-namespace,
    POD_NAMESPACE), not its name: a controller renamed, a shard named otherwise, one in another namespace electing in
    gputide are each caught; a Deployment named as the Lease that runs no controller is not one."""
    kube.add(controller("balancer"))
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 1 and f"deployment/balancer in gputide runs a controller on Lease {OLD}" in err and out == "", err
    kube.delete("deployments", "balancer", "gputide")
    kube.add(controller("east", "gputide", "--shard=a", "--selector=gputide.io/shard=a"))
    code, _, err = hand_over(capsys, "gputide-controller-a", "gputide-controller")
    assert code == 1 and f"deployment/east in gputide runs a controller on Lease {SHARD_A}" in err, err
    kube.delete("deployments", "east", "gputide")
    kube.add(controller("elsewhere", "ops", "--lease-name", "gputide-controller-b", "--lease-namespace=gputide"))
    code, _, err = hand_over(capsys, "gputide-controller-b", "gputide-controller")
    assert code == 1 and f"deployment/elsewhere in ops runs a controller on Lease {SHARD_B}" in err, err
    assert not writes(kube)
    # ... and no other Lease's: shard b's controller does not hold up the unsharded one's hand-over
    code, _, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 0 and err == "", err


def abbreviated(name: str, *args: str) -> dict:
    """The base controller's Deployment whose args are `args` alone."""
    dep = controller(name)
    dep["spec"]["template"]["spec"]["containers"][0]["args"] = ["run", *args]
    return dep


def test_a_controller_given_abbreviated_flags_is_read_as_gputide_run_reads_them(kube, capsys):
    """`gputide run` takes any unambiguous prefix of a flag (argparse): --prom= is --prometheus, --shar=a is --shard a,
    --lease-namespa is --lease-namespace. Read by hand, --prom= ran no controller and --shar=a no shard, so the
    controller was missed (its floors handed over under it), and --lease-namespa left the pod's namespace, wrongly
    refusing the hand-over of a Lease it does not elect on."""
    kube.add(abbreviated("east", "--prom=http://prom:9090", "--shar=a", "--sel=gputide.io/shard=a"))
    code, out, err = hand_over(capsys, "gputide-controller-a", "gputide-controller")
    assert code == 1 and f"deployment/east in gputide runs a controller on Lease {SHARD_A}" in err, err
    assert out == "" and not writes(kube)
    kube.delete("deployments", "east", "gputide")
    kube.add(controller("west", "gputide", "--lease-namespa", "other"))   # the last given counts, as argparse's
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 0 and err == "" and "1 HPA floor(s), 1 " in out, err   # west elects in other, not gputide
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--namespace", "other")
    assert code == 1 and f"deployment/west in gputide runs a controller on Lease {ELSEWHERE}" in err, err
    # an ambiguous prefix (--lease: -name or -namespace?) is refused by `gputide run` too: no controller runs so
    kube.delete("deployments", "west", "gputide")
    kube.add(abbreviated("broken", "--prometheus=http://prom:9090", "--lease=gputide-controller-b"))
    code, out, err = hand_over(capsys, "gputide-controller-b", "gputide-controller")
    assert code == 0 and err == "", err


def from_outside(dep: dict, var: str, ref: str = "configMapKeyRef") -> dict:
    """`dep` whose container's env takes `var` from a ConfigMap's key (or a Secret's): the kubelet fills its $(var),
    unknown here."""
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [*container.get("env", []), {"name": var, "valueFrom": {ref: {"name": "gputide", "key": var}}}]
    return dep


def test_a_value_the_kubelet_fills_from_outside_the_args_does_not_hide_the_controller(kube, capsys):
    """gputide run's parser checks its values' types; --metrics-port=$(PORT) (from a ConfigMap, left unexpanded here)
    failed int() and the Deployment was judged to run no controller, its floors handed over under it."""
    kube.add(from_outside(controller("balancer", "gputide", "--metrics-port=$(PORT)", "--interval", "$(EVERY)"),
                          "PORT"))
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 1 and f"deployment/balancer in gputide runs a controller on Lease {OLD}: stop it" in err, err
    assert out == "" and not writes(kube)


@pytest.mark.parametrize("flag, may_be", [("--shard=$(SHARD)", SHARD_A),
                                          ("--lease-name=gputide-controller-$(SHARD)", SHARD_A),
                                          ("--lease-namespace=$(SHARD)", OLD)])
def test_a_lease_named_from_outside_the_args_refuses_a_hand_over_of_what_it_may_be(kube, capsys, flag, may_be):
    """--shard=$(SHARD) from a ConfigMap's key: the Lease it elects on cannot be told here (read as written, shard
    "$(SHARD)", it was no Lease handed over and the hand-over went ahead), so it may be any shard's: refused, saying
    why. But never the unsharded controller's (gputide-controller-$(SHARD) is not gputide-controller), nor
    --lease-namespace=$(SHARD)'s gputide-controller a shard's: a hand-over of those went ahead (was: refused, saying
    the Deployment may be it)."""
    kube.add(from_outside(controller("east", "gputide", flag, "--selector=gputide.io/shard=a"), "SHARD"))
    for lease_name, writer in (("gputide-controller-a", SHARD_A), ("gputide-controller", OLD)):
        code, out, err = hand_over(capsys, lease_name, "gputide-controller-b", "--dry-run")
        if writer != may_be:
            assert code == 0 and err == "" and "would hand from " in out, err
            continue
        assert code == 0 and "deployment/east in gputide runs a controller on Lease " in err, err
        assert f"which cannot be told here (its --shard, --lease-name or --lease-namespace takes a $(VAR) set " \
               f"from outside its args: a ConfigMap, a Secret, envFrom), so it may be {writer}: a run now would be " \
               "refused" in err, err
    code, out, err = hand_over(capsys, may_be.split("/")[1], "gputide-controller-b")
    assert code == 1 and f"so it may be {may_be}: stop it" in err and out == "" and not writes(kube), err


def test_a_lease_named_from_outside_the_args_in_another_namespace_holds_up_only_its_own(kube, capsys):
    """A team's shard electing in its own namespace (--lease-namespace=team-b, --shard=$(SHARD) from a ConfigMap)
    refused every hand-over, saying it "may be gputide/gputide-controller": its Lease is team-b's, whatever SHARD is."""
    kube.add(from_outside(controller("east", "team-b", "--lease-namespace=team-b", "--shard=$(SHARD)",
                                     "--selector=gputide.io/shard=a"), "SHARD"))
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 0 and err == "" and "1 HPA floor(s), 1 " in out, err
    code, out, err = hand_over(capsys, "gputide-controller-a", "gputide-controller", "--dry-run")
    assert code == 0 and err == "", err
    code, out, err = hand_over(capsys, "gputide-controller-x", "gputide-controller", "--namespace", "team-b")
    assert code == 1 and "deployment/east in team-b runs a controller on Lease team-b/gputide-controller-$(SHARD), " \
                          "which cannot be told here" in err and "so it may be team-b/gputide-controller-x" in err, err
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--namespace", "team-b")
    assert code == 0 and err == "", err


def replaced(kube: FakeKube, dep: dict) -> None:
    kube.delete("deployments", dep["metadata"]["name"], dep["metadata"]["namespace"])
    kube.add(dep)


def test_an_env_value_made_of_earlier_ones_is_expanded_as_the_kubelet_does(kube, capsys):
    """LEASE=gputide-controller-$(SHARD) with SHARD=a before it: the kubelet gives the controller gputide-controller-a;
    a value that refers to a later variable (or one from outside) keeps its $(VAR), which may be anything."""
    dep = controller("east", "gputide", "--lease-name=$(LEASE)")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [*container.get("env", []), {"name": "SHARD", "value": "a"},
                        {"name": "LEASE", "value": "gputide-controller-$(SHARD)"}]
    kube.add(dep)
    code, out, err = hand_over(capsys, "gputide-controller-a", "gputide-controller")
    assert code == 1 and f"deployment/east in gputide runs a controller on Lease {SHARD_A}: stop it" in err, err
    code, out, err = hand_over(capsys, "gputide-controller-b", "gputide-controller")   # a alone: not b
    assert code == 0 and err == "", err
    container["env"] = container["env"][::-1]   # SHARD after LEASE: $(SHARD) left as written
    replaced(kube, dep)
    code, out, err = hand_over(capsys, "gputide-controller-b", "gputide-controller", "--dry-run")
    assert code == 0 and "on Lease gputide/gputide-controller-$(SHARD), which cannot be told here" in err, err
    assert "so it may be gputide/gputide-controller-b: a run now would be refused" in err, err


@pytest.mark.parametrize("flag", ["--metrics-port=abc", "--policy=", "--listen-address=", "--shard=",
                                  "--interval=$(EVERY)"])
def test_args_gputide_run_exits_2_on_run_no_controller(kube, capsys, flag):
    """`gputide run` exits 2 on --metrics-port=abc, --policy= or --listen-address=: that Deployment crash-loops and
    writes nothing, so it holds up no hand-over (its type checks were all dropped, 15d56f2f, for a $(VAR)'s sake:
    only a value with one skips its check, and --interval takes any text as the parser reads it)."""
    kube.add(controller("broken", "gputide", flag))
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    if flag == "--interval=$(EVERY)":
        assert code == 1 and f"deployment/broken in gputide runs a controller on Lease {OLD}" in err, err
    else:
        assert code == 0 and err == "" and "1 HPA floor(s), 1 " in out, err


def test_the_operators_own_listen_address_is_not_the_controllers(kube, capsys, monkeypatch):
    """--listen-address defaults to $GPUTIDE_LISTEN_ADDRESS, the controller's own (its container's env), not the
    operator's: set empty on the operator's machine, every Deployment's args read as refused (no controller, its
    floors handed over under it); set empty in the container's env, the controller exits 2 (none runs)."""
    from balancer.cmd import hand_over_floors

    monkeypatch.setenv("GPUTIDE_LISTEN_ADDRESS", "")
    hand_over_floors._run_parser.cache_clear()   # built with the environment it was first built in
    try:
        dep = controller("balancer")
        kube.add(dep)
        code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
        assert code == 1 and f"deployment/balancer in gputide runs a controller on Lease {OLD}: stop it" in err, err
        monkeypatch.delenv("GPUTIDE_LISTEN_ADDRESS")
        container = dep["spec"]["template"]["spec"]["containers"][0]
        container["env"] = [*container.get("env", []), {"name": "GPUTIDE_LISTEN_ADDRESS", "value": " "}]
        replaced(kube, dep)
        code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
        assert code == 0 and err == "" and "1 HPA floor(s), 1 " in out, err
        container["args"] = [*container["args"], "--listen-address=::"]   # given: the environment's is not read
        replaced(kube, dep)
        code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--dry-run")
        assert code == 0 and f"deployment/balancer in gputide runs a controller on Lease {OLD}" in err, err
    finally:
        hand_over_floors._run_parser.cache_clear()


def test_an_unrelated_deployment_is_not_the_controller(kube, capsys):
    """A Deployment named as the Lease that runs something else, and one whose command has a `run` of its own (no
    --prometheus: no `gputide run`), hold nothing up."""
    kube.add(deployment("gputide-controller", "gputide"))
    npm = deployment("web", "gputide")
    npm["spec"]["template"]["spec"]["containers"][0].update(command=["npm", "run", "start"], args=["--port=80"])
    kube.add(npm)
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 0 and err == "" and "1 HPA floor(s), 1 " in out, err


@pytest.mark.parametrize("holder, ago, refused", [("controller-7f9-x", 5, True), ("controller-7f9-x", 3600, False),
                                                 ("", 5, False)], ids=["held", "expired", "released"])
def test_a_lease_held_by_a_controller_run_some_other_way_refuses(kube, capsys, holder, ago, refused):
    """No Deployment runs it, but its Lease is held and renewed (a StatefulSet, a bare pod): refused; a Lease whose
    renewal expired (its controller killed) or released (stopped as it should) is not."""
    kube.add(lease("gputide-controller", holder, ago))
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    if refused:
        assert code == 1 and f"Lease {OLD} is held by controller-7f9-x for " in err and not writes(kube), err
    else:
        assert code == 0 and err == "" and "1 HPA floor(s), 1 " in out, err


def test_a_floor_written_between_the_read_and_the_hand_over_is_not_lost(kube, capsys):
    """Someone writes the HPA after the list: the patch at the resourceVersion read is refused (409), so the command
    reads it again and hands that over (`_Api.update`): their write stands, the writer renamed, in one run (it gave up
    and asked for a rerun before)."""
    kube.before("PATCH", r"/horizontalpodautoscalers/llm(\?|$)", lambda: kube.mutate(HPAS, "llm", "chat", {
        "metadata": {"annotations": {HPA_FLOOR_ANNOTATION: "7"}}, "spec": {"minReplicas": 7}}))
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 0 and err == "", err
    assert "1 HPA floor(s), 1 " in out and entry_owner(kube, "chat.llm") == SHARD_A
    llm = hpas(kube)["llm"]
    assert llm["spec"]["minReplicas"] == 7 and llm["metadata"]["annotations"][HPA_FLOOR_ANNOTATION] == "7"
    assert llm["metadata"]["annotations"][HPA_FLOOR_OWNER_ANNOTATION] == SHARD_A
    assert [r.method for r in kube.requests if "/horizontalpodautoscalers/llm" in r.path] == ["PATCH", "GET", "PATCH"]


def test_a_conflict_once_is_retried_and_the_hand_over_completes(kube, capsys):
    """A 409 on the first write of each object (the API server's answer to a write in between): read again, written
    again, all handed over in one run, exit 0."""
    kube.inject("PATCH", r"/horizontalpodautoscalers/llm(\?|$)", 409)
    kube.inject("PUT", rf"/configmaps/{RECORD}$", 409)
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 0 and err == "", err
    assert out.splitlines()[-1] == f"handed from {OLD} to {SHARD_A}: 1 HPA floor(s), 1 {RECORD} entry"
    assert hpas(kube)["llm"]["metadata"]["annotations"][HPA_FLOOR_OWNER_ANNOTATION] == SHARD_A
    assert entry_owner(kube, "chat.llm") == SHARD_A and entry_owner(kube, "search.embed") == SHARD_B


def test_a_floor_handed_elsewhere_in_between_is_left(kube, capsys):
    """Read again after a 409, the floor names another writer now (given to shard b meanwhile): not this hand-over's,
    left as written and not counted."""
    kube.before("PATCH", r"/horizontalpodautoscalers/llm(\?|$)", lambda: kube.mutate(HPAS, "llm", "chat", {
        "metadata": {"annotations": {HPA_FLOOR_OWNER_ANNOTATION: SHARD_B}}}))
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 0 and err == "", err
    assert "hpa chat/llm" not in out and "0 HPA floor(s), 1 " in out
    assert hpas(kube)["llm"]["metadata"]["annotations"][HPA_FLOOR_OWNER_ANNOTATION] == SHARD_B


def test_a_write_that_landed_with_its_answer_lost_is_counted_as_handed(kube, capsys):
    """The PATCH and the PUT land but their answers are lost (here a 503 after the write; a timeout alike): the client
    (`_Api`) sends them again at the resourceVersion read, the API server answers 409, and read again the floor and
    the entry name TO. That is this run's hand-over: printed and counted (it said "0 HPA floor(s), 0 entries", exit 0,
    with both handed)."""
    kube.before("PATCH", r"/horizontalpodautoscalers/llm(\?|$)", lambda: kube.mutate(HPAS, "llm", "chat", {
        "metadata": {"annotations": {HPA_FLOOR_OWNER_ANNOTATION: SHARD_A}}}))
    kube.inject("PATCH", r"/horizontalpodautoscalers/llm(\?|$)", 503)
    kube.before("PUT", rf"/configmaps/{RECORD}$", lambda: kube.mutate("configmaps", RECORD, "gputide", {
        "data": {"chat.llm": Entry(2, 1, SHARD_A, "chat", "llm").text()}}))
    kube.inject("PUT", rf"/configmaps/{RECORD}$", 503)
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 0 and err == "", err
    assert out.splitlines() == [
        f"hpa chat/llm: floor handed from {OLD} to {SHARD_A}",
        f"configmap gputide/{RECORD} chat.llm: entry handed from {OLD} to {SHARD_A}",
        f"handed from {OLD} to {SHARD_A}: 1 HPA floor(s), 1 {RECORD} entry"]
    assert [r.method for r in kube.requests if "/horizontalpodautoscalers/llm" in r.path] == [
        "PATCH", "PATCH", "GET"]   # the lost answer, the retry refused (409), the read that finds it handed
    assert entry_owner(kube, "chat.llm") == SHARD_A and entry_owner(kube, "search.embed") == SHARD_B


def test_a_floor_written_before_every_try_fails_and_a_rerun_finishes(kube, capsys):
    """Conflicts past the retries: that HPA fails (exit 1, nothing of it lost), the rest is handed over, a rerun
    finishes."""
    kube.inject("PATCH", r"/horizontalpodautoscalers/llm(\?|$)", 409, count=4)
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 1 and "hpa chat/llm: HTTP 409" in err and "run it again" in err, err
    assert hpas(kube)["llm"]["metadata"]["annotations"][HPA_FLOOR_OWNER_ANNOTATION] == OLD
    assert "0 HPA floor(s), 1 " in out and entry_owner(kube, "chat.llm") == SHARD_A
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 0 and "1 HPA floor(s), 0 " in out, err
    assert hpas(kube)["llm"]["metadata"]["annotations"][HPA_FLOOR_OWNER_ANNOTATION] == SHARD_A


def test_a_record_written_between_the_read_and_the_hand_over_is_not_lost(kube, capsys):
    """A controller records a new entry after the read: the replace at the resourceVersion read is refused (409), so
    the record is read again and replaced with both: the new entry stands, the old one handed over, in one run."""
    new = Entry(3, 1, SHARD_B, "chat", "rag").text()
    kube.before("PUT", rf"/configmaps/{RECORD}$", lambda: kube.mutate("configmaps", RECORD, "gputide", {
        "data": {"chat.rag": new}}))
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 0 and err == "", err
    assert "1 HPA floor(s), 1 " in out
    assert data(kube)["chat.rag"] == new and entry_owner(kube, "chat.llm") == SHARD_A


def test_dry_run_says_what_it_would_hand_over_and_writes_nothing(kube, capsys):
    before = state(kube)
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--dry-run")
    assert code == 0 and err == "", err
    assert out.splitlines() == [
        f"hpa chat/llm: floor would be handed from {OLD} to {SHARD_A}",
        f"configmap gputide/{RECORD} chat.llm: entry would be handed from {OLD} to {SHARD_A}",
        f"would hand from {OLD} to {SHARD_A}: 1 HPA floor(s), 1 {RECORD} entry"]
    assert state(kube) == before and not writes(kube)
    # before the old controller is deleted: the same list, and a word that the run would be refused
    kube.add(controller("gputide-controller"))
    code, again, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--dry-run")
    assert code == 0 and again == out and "a run now would be refused" in err
    assert state(kube) == before and not writes(kube)


def test_nothing_of_the_controllers_is_a_no_op(kube, capsys):
    kube.delete("configmaps", RECORD, "gputide")
    before = state(kube)
    code, out, err = hand_over(capsys, "gputide-controller-c", "gputide-controller")
    assert code == 0, err
    assert out == f"handed from gputide/gputide-controller-c to {OLD}: 0 HPA floor(s), 0 {RECORD} entries\n"
    assert state(kube) == before and not writes(kube)


@pytest.mark.parametrize("argv, field", [
    (["gputide/gputide-controller", "gputide-controller-a"], "FROM"),
    (["gputide-controller", "Gputide-Controller-A"], "TO"),
    (["", "gputide-controller-a"], "FROM"),
    (["gputide-controller", "gputide-controller"], "TO"),
    (["gputide-controller", "gputide-controller-a", "--namespace", "gputide/x"], "--namespace"),
    (["gputide-controller", "gputide-controller-a", "--namespace", ""], "--namespace"),
    (["gputide-controller", "gputide-controller-a", "--kubeconfig", ""], "--kubeconfig"),
], ids=["FROM namespaced", "TO upper case", "FROM empty", "TO is FROM", "bad namespace", "empty namespace",
        "empty kubeconfig"])
def test_bad_input_exits_2_naming_it_before_any_call(kube, capsys, argv, field):
    code, out, err = hand_over(capsys, *argv)
    assert code == 2 and err.startswith(f"gputide: error: field '{field}': invalid value "), err
    assert not kube.requests


def test_an_unreadable_list_fails_without_a_traceback(kube, capsys):
    kube.inject("GET", r"/horizontalpodautoscalers$", 403)
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 1 and "list HPAs: HTTP 403" in err and not writes(kube), err


def test_the_overlays_switch_steps_run_the_command_between_delete_and_apply():
    """Both ways: unsharded to a shard after deleting the controller and before applying the shards, and each shard's
    back to the controller after deleting the shards; every step is a command line the parser takes. (Moved from
    tests/deploy/test_deploy_shards_handover.py with the script.)"""
    text = "\n".join(line[1:].strip() for line in OVERLAY.read_text().splitlines() if line.startswith("#"))
    assert "hand-over-floors.sh" not in text
    base_role = next(d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "rbac.yaml").read_text())
                     if d and d["kind"] == "Role" and d["metadata"]["name"] == "gputide-leader-election")
    (lease,) = base_role["rules"][0]["resourceNames"]
    role_patch = next(p for p in yaml.safe_load(OVERLAY.read_text())["patches"]
                      if p["target"] == {"kind": "Role", "name": "gputide-leader-election"})
    shards = yaml.safe_load(role_patch["patch"])[0]["value"]
    assert lease == "gputide-controller" and sorted(shards) == ["gputide-controller-a", "gputide-controller-b"]
    steps = re.findall(r"^\s*gputide hand-over-floors (.+)$", text, re.M)
    for step in steps:
        args = build_parser().parse_args(["hand-over-floors", *step.split()])
        assert args.func.__module__ == "balancer.cmd.hand_over_floors" and args.namespace == "gputide", step
    pairs = [tuple(s.split()) for s in steps]
    assert pairs[0][0] == lease and pairs[0][1] in shards
    assert sorted(f for f, t in pairs[1:] if t == lease) == sorted(shards) and len(pairs) == 1 + len(shards)
    first = text.index("gputide hand-over-floors")
    assert text.index("delete deployment/gputide-controller --cascade=foreground") < first < text.index(
        "kubectl apply -k")
    assert text.index("Back to unsharded") < text.index(f"gputide hand-over-floors {sorted(shards)[0]}")


@pytest.mark.parametrize("source", ["configMapKeyRef", "envFrom"])
def test_a_pod_namespace_set_from_outside_may_be_any_namespace(kube, capsys, source):
    """A controller with no --lease-namespace elects in its POD_NAMESPACE; one set from a ConfigMap's key (or that
    may come from envFrom, no env entry naming it) cannot be told here. It was read as unset, the Lease looked for in
    the Deployment's namespace (team-b), and a hand-over of gputide's Lease went ahead under a controller that may
    elect there."""
    dep = controller("east", "team-b")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["args"] = [a for a in container["args"] if not a.startswith("--lease-namespace")]
    container["env"] = [v for v in container.get("env", []) if v.get("name") != "POD_NAMESPACE"]
    if source == "envFrom":
        container["envFrom"] = [{"configMapRef": {"name": "team-b-env"}}]
    else:
        container.pop("envFrom", None)
        from_outside(dep, "POD_NAMESPACE")
    kube.add(dep)
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 1 and "deployment/east in team-b runs a controller on Lease $(POD_NAMESPACE)/gputide-controller" \
                          in err and f"so it may be {OLD}: stop it" in err and out == "" and not writes(kube), err


def without_pod_namespace(name: str, ns: str) -> dict:
    """The base controller in `ns` with no --lease-namespace, no POD_NAMESPACE and no envFrom: it elects in the
    namespace its service-account token names, else in gputide (`balancer.cmd.run.own_namespace`)."""
    dep = controller(name, ns)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["args"] = [a for a in container["args"] if not a.startswith("--lease-namespace")]
    container["env"] = [v for v in container.get("env", []) if v.get("name") != "POD_NAMESPACE"]
    container.pop("envFrom", None)
    return dep


TOKEN = {"name": "token", "projected": {"sources": [
    {"serviceAccountToken": {"path": "token"}},
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}
ODD = {"name": "token", "configMap": {"name": "odd"}}   # its namespace file, if any, cannot be told here
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
MAY_MOUNT_NO_TOKEN = ("its pod may mount no service-account token (automountServiceAccountToken left to its "
                      "ServiceAccount")
MOUNTS_NO_TOKEN = "its pod mounts no service-account token (automountServiceAccountToken false)"


def mounted(dep: dict, automount: bool | None, *mounts: tuple[dict, str, str | None]) -> dict:
    """`dep` whose pod says `automount` (None: not said, left to its ServiceAccount) and whose container mounts each
    (volume, mountPath, subPath) given."""
    pod = dep["spec"]["template"]["spec"]
    if automount is not None:
        pod["automountServiceAccountToken"] = automount
    for volume, path, sub in mounts:
        pod["volumes"] = [*pod.get("volumes", []), volume]
        pod["containers"][0]["volumeMounts"] = [*pod["containers"][0].get("volumeMounts", []), {
            "name": volume["name"], "mountPath": path, "readOnly": True, **({"subPath": sub} if sub else {})}]
    return dep


def test_with_no_pod_namespace_a_pod_that_may_mount_no_token_may_elect_in_gputide(kube, capsys):
    """`gputide run` with no POD_NAMESPACE and no --lease-namespace elects in the namespace its service-account
    token's namespace file names, else (no token mounted) in gputide. The guard took the Deployment's namespace
    always: a team-b controller whose pod says automountServiceAccountToken: false, electing on
    gputide/gputide-controller, did not hold up that Lease's hand-over, which went ahead under it. Where the pod
    leaves it to its ServiceAccount (not read), either may be; a token mounted (or a hand-made projected one giving
    the pod's namespace) is the pod's alone. Each refusal says why as it was judged: gputide alone for a token not
    mounted (said with no reason before), either for one left to the ServiceAccount; none for the pod's own."""
    kube.add(without_pod_namespace("east", "team-b"))
    for automount, volume, elects, reason in ((None, None, ("team-b", "gputide"), MAY_MOUNT_NO_TOKEN),
                                              (False, None, ("gputide",), MOUNTS_NO_TOKEN),
                                              (True, None, ("team-b",), None), (False, TOKEN, ("team-b",), None)):
        replaced(kube, mounted(without_pod_namespace("east", "team-b"), automount,
                               *([(volume, SA_DIR + "/", None)] if volume else [])))
        said = " or ".join(f"{ns}/gputide-controller" for ns in elects)
        for ns in ("gputide", "team-b", "other"):
            code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--namespace", ns,
                                       "--dry-run")
            if ns not in elects:
                assert code == 0 and err == "" and "would hand from " in out, (automount, volume, ns, err)
                continue
            told = f"deployment/east in team-b runs a controller on Lease {said}"
            assert told + (f" (with no --lease-namespace or POD_NAMESPACE, `gputide run` elects in the namespace "
                           f"that {SA_DIR}/namespace names, else in gputide: {reason}" if reason else
                           ": a run now would be refused") in err, (automount, volume, ns, err)
    replaced(kube, without_pod_namespace("east", "team-b"))
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")   # left to it: either
    assert code == 1 and f"runs a controller on Lease team-b/gputide-controller or {OLD} (" in err, err
    assert out == "" and not writes(kube)
    # the shipped controller (its POD_NAMESPACE the pod's namespace) holds up its own namespace's alone, token or not
    dep = controller("east", "team-b")
    dep["spec"]["template"]["spec"]["automountServiceAccountToken"] = False
    replaced(kube, dep)
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 0 and err == "" and "1 HPA floor(s), 1 " in out, err
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--namespace", "team-b")
    assert code == 1 and "deployment/east in team-b runs a controller on Lease team-b/gputide-controller: " in err


NAME_AS_NAMESPACE = {"name": "token", "projected": {"sources": [
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.name"}}]}}]}}


@pytest.mark.parametrize("automount", [True, None, False], ids=["automount", "left", "no-automount"])
@pytest.mark.parametrize("mounts, kind", [
    ([(ODD, SA_DIR + "/", None)], "configMap"),
    ([({"name": "token", "secret": {"secretName": "odd"}}, SA_DIR, None)], "secret"),
    ([({"name": "token", "hostPath": {"path": "/etc/odd"}}, SA_DIR, None)], "hostPath"),
    ([(NAME_AS_NAMESPACE, SA_DIR, None)], "projected"),
    ([(TOKEN, SA_DIR, None), ({**ODD, "name": "odd"}, SA_DIR + "/namespace", "ns")], "configMap"),
], ids=["configMap", "secret", "hostPath", "not-metadata.namespace", "configMap-key-over-a-token"])
def test_a_volume_over_the_namespace_file_may_name_any_namespace(kube, capsys, automount, mounts, kind):
    """A ConfigMap, a Secret, a hostPath (anything but a volume giving the pod's metadata.namespace there) mounted
    over the service-account namespace file may name a third namespace, which `gputide run` with no POD_NAMESPACE
    elects in. It was taken for the Deployment's namespace or gputide: a hand-over of team-c's Lease went ahead under
    it, and the refusal of gputide's blamed automountServiceAccountToken ("false or left to its ServiceAccount"),
    even where the pod mounts the token. Now any namespace, as a POD_NAMESPACE from a ConfigMap is, saying that
    volume. The deepest mount decides: a ConfigMap key mounted at the file itself wins over a token's projected
    directory."""
    kube.add(mounted(without_pod_namespace("east", "team-b"), automount, *mounts))
    name, path = mounts[-1][0]["name"], mounts[-1][1]
    for ns in ("team-c", "gputide", "team-b"):
        code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--namespace", ns)
        assert code == 1 and out == "" and not writes(kube), (ns, err)
        assert (f"deployment/east in team-b runs a controller on Lease $(namespace file)/gputide-controller, which "
                f"cannot be told here (with no --lease-namespace or POD_NAMESPACE, `gputide run` elects in the "
                f"namespace that {SA_DIR}/namespace names, else in gputide, and its volume {name} ({kind}) mounted "
                f"over it at {path} may put any namespace there), so it may be {ns}/gputide-controller: stop it") in err
        assert "automountServiceAccountToken" not in err, err
    code, out, err = hand_over(capsys, "gputide-controller-a", "gputide-controller", "--namespace", "team-c")
    assert code == 0 and err == "", err   # its Lease's name is told: gputide-controller's alone


@pytest.mark.parametrize("automount, mounts, elects", [
    (True, [({"name": "run", "emptyDir": {}}, "/var/run", None)], ("team-b",)),
    (False, [({"name": "run", "emptyDir": {}}, "/var/run", None)], None),
    (None, [({"name": "run", "emptyDir": {}}, "/var/run", None)], None),
    (None, [({"name": "run", "emptyDir": {}}, "/var/run", None), ({"name": "secrets", "projected": {"sources": [
        {"downwardAPI": {"items": [{"path": "kubernetes.io/serviceaccount/namespace",
                                    "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}, "/var/run/secrets", None)],
     ("team-b",)),
    (True, [(TOKEN, SA_DIR, None), ({"name": "run", "emptyDir": {}}, "/var/run", None)], ("team-b",)),
], ids=["emptyDir-under-a-token", "emptyDir-no-token", "emptyDir-token-left", "projected-over-an-emptyDir",
        "token-and-emptyDir"])
def test_the_deepest_mount_over_the_namespace_file_decides(kube, capsys, automount, mounts, elects):
    """The kubelet mounts a deeper path over a shallower one: an emptyDir at /var/run under a mounted token (the
    token's directory, deeper) reads the token's namespace, the pod's alone (it was taken for either, refusing
    gputide's hand-over as well); with no token mounted (or one that may not be) the emptyDir is the file's, which
    another container may write: any namespace. A projected volume giving the pod's namespace at the file's place,
    mounted over that emptyDir, is the pod's."""
    kube.add(mounted(without_pod_namespace("east", "team-b"), automount, *mounts))
    for ns in ("team-b", "gputide", "team-c"):
        code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--namespace", ns,
                                   "--dry-run")
        if elects is None or ns in elects:
            said = "team-b/gputide-controller: " if elects else "$(namespace file)/gputide-controller, which cannot"
            assert code == 0 and f"deployment/east in team-b runs a controller on Lease {said}" in err, (ns, err)
        else:
            assert code == 0 and err == "" and "would hand from " in out, (ns, err)


def test_a_native_sidecar_or_init_container_controller_holds_up_its_lease(kube, capsys):
    """A `gputide run` as a native sidecar (an initContainer with restartPolicy Always) runs beside the pod's
    containers for its life: only `containers` were read, and a hand-over went ahead under it. A plain initContainer
    must end before the pod's containers start, and `gputide run` with no --once never ends: it is the controller,
    running there for good (its pod never starting); with --once it runs a cycle at each start of one of the
    Deployment's pods, writing as its Lease. Either was taken for no controller, and the hand-over went ahead."""
    dep = controller("east", "gputide")
    pod = dep["spec"]["template"]["spec"]
    sidecar = {**pod["containers"][0], "name": "gputide", "restartPolicy": "Always"}
    pod["initContainers"], pod["containers"] = [sidecar], [{"name": "app", "image": "nginx", "args": ["run"]}]
    kube.add(dep)
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 1 and out == "" and not writes(kube), err
    assert f"deployment/east in gputide runs a controller on Lease {OLD}: stop it first" in err, err
    args = sidecar["args"]
    for restart, once in (("OnFailure", False), (None, False), (None, True)):   # a plain initContainer (none may
        sidecar.pop("restartPolicy", None)                                     # say another restartPolicy; alike)
        if restart:
            sidecar["restartPolicy"] = restart
        sidecar["args"] = [*args, "--once"] if once else args
        replaced(kube, dep)
        code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
        assert code == 1 and out == "" and not writes(kube), (restart, once, err)
        assert "deployment/east in gputide runs a controller in its initContainer gputide, " + (
            "once at each start of one of its pods (`gputide run --once`)" if once else
            "for good (`gputide run` with no --once never ends, so its pod's containers never start)") + (
            f" on Lease {OLD}: stop it first") in err, (restart, once, err)
    code, out, err = hand_over(capsys, "gputide-controller-b", "gputide-controller", "--dry-run")
    assert code == 0 and err == "", err   # another Lease's: not held up


def test_a_later_env_entry_from_outside_replaces_an_earlier_literal(kube, capsys):
    """The kubelet sets the last env entry of a name: SHARD=a and then SHARD from a ConfigMap's key is the
    ConfigMap's, unknown here, so --shard=$(SHARD) may be any shard's Lease. The literal was kept, the controller
    taken for shard a's alone, and a hand-over of shard b's floors went ahead under it."""
    dep = controller("east", "gputide", "--shard=$(SHARD)", "--selector=gputide.io/shard=a")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [*container.get("env", []), {"name": "SHARD", "value": "a"}]
    kube.add(from_outside(dep, "SHARD"))
    code, out, err = hand_over(capsys, "gputide-controller-b", "gputide-controller")
    assert code == 1 and "deployment/east in gputide runs a controller on Lease gputide/gputide-controller-$(SHARD), " \
                          "which cannot be told here" in err and f"so it may be {SHARD_B}: stop it" in err, err
    assert out == "" and not writes(kube)
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--dry-run")
    assert code == 0 and err == "", err   # a shard's Lease, whatever SHARD is: not the unsharded one's
    container["env"].append({"name": "SHARD", "value": "a"})   # a literal last: shard a's alone
    replaced(kube, dep)
    code, out, err = hand_over(capsys, "gputide-controller-b", "gputide-controller", "--dry-run")
    assert code == 0 and err == "", err
    code, out, err = hand_over(capsys, "gputide-controller-a", "gputide-controller", "--dry-run")
    assert f"runs a controller on Lease {SHARD_A}: a run now would be refused" in err, err
    container["env"].append({"name": "SHARD"})   # no value: "" (--shard= , which gputide run exits 2 on)
    replaced(kube, dep)
    code, out, err = hand_over(capsys, "gputide-controller-a", "gputide-controller", "--dry-run")
    assert code == 0 and err == "", err


KUBE_API_ACCESS = {"name": "kube-api-access-xyz", "projected": {"defaultMode": 420, "sources": [   # a running pod's
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                  "fieldPath": "metadata.namespace"}}]}}]}}
ODD_ACCESS = {"name": "kube-api-access-xyz", "configMap": {"name": "odd"}}
ALL_KEYS_ACCESS = {"name": "kube-api-access-xyz", "projected": {"sources": [
    *KUBE_API_ACCESS["projected"]["sources"], {"configMap": {"name": "odd"}}]}}   # each of odd's keys, namespace too
BY_PLUGIN = (" by the ServiceAccount admission plugin (the pod's first volume named kube-api-access-*, where it "
             "mounts the token)")


@pytest.mark.parametrize("automount, volume, mount, elects, said", [
    (True, ODD_ACCESS, None, None, f"kube-api-access-xyz (configMap) mounted over it at {SA_DIR}{BY_PLUGIN}"),
    (None, ODD_ACCESS, None, None, f"kube-api-access-xyz (configMap) mounted over it at {SA_DIR}{BY_PLUGIN}"),
    (False, ODD_ACCESS, None, ("gputide",), MOUNTS_NO_TOKEN),
    (True, ALL_KEYS_ACCESS, None, None, f"kube-api-access-xyz (projected) mounted over it at {SA_DIR}{BY_PLUGIN}"),
    (False, ALL_KEYS_ACCESS, SA_DIR, None, f"kube-api-access-xyz (projected) mounted over it at {SA_DIR} may"),
    (True, KUBE_API_ACCESS, None, ("team-b",), None),
    (None, KUBE_API_ACCESS, None, ("team-b", "gputide"), MAY_MOUNT_NO_TOKEN),
    (False, KUBE_API_ACCESS, SA_DIR + "/", ("team-b",), None),
    (None, KUBE_API_ACCESS, "/var/run/secrets/kubernetes.io/./serviceaccount", ("team-b",), None),
], ids=["odd-automount", "odd-left", "odd-no-automount", "all-keys", "all-keys-mounted", "copied-automount",
        "copied-left", "copied-mounted-slash", "copied-mounted-dot"])
def test_a_pods_kube_api_access_volume_is_the_token_the_plugin_mounts(kube, capsys, automount, volume, mount,
                                                                       elects, said):
    """The ServiceAccount admission plugin, where the pod mounts the token, mounts the pod's first volume named
    kube-api-access-* (a spec copied from a running pod carries one) over the namespace file, whatever kind it is,
    in each container with no mount at that path as written. It was taken for the plugin's own projected token: a
    ConfigMap named kube-api-access-xyz, whose namespace key names team-c, was read as team-b's, and a hand-over of
    team-c's Lease went ahead under the controller electing there. A projected source listing no items (each key of
    a ConfigMap, a namespace key too) may write over the downwardAPI item. The running pod's own volume, copied, is
    the pod's namespace (mounted by the plugin, or by the container at the path however written)."""
    dep = mounted(without_pod_namespace("east", "team-b"), automount, *([(volume, mount, None)] if mount else []))
    dep["spec"]["template"]["spec"]["volumes"] = [volume]   # mounted by the container, or by the plugin alone
    kube.add(dep)
    for ns in ("team-c", "team-b", "gputide"):
        code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--namespace", ns,
                                   "--dry-run")
        if elects is None:
            assert (f"deployment/east in team-b runs a controller on Lease $(namespace file)/gputide-controller, "
                    f"which cannot be told here (with no --lease-namespace or POD_NAMESPACE, `gputide run` elects in "
                    f"the namespace that {SA_DIR}/namespace names, else in gputide, and its volume {said}") in err, \
                (ns, err)
        elif ns in elects:
            told = " or ".join(f"{e}/gputide-controller" for e in elects)
            assert f"deployment/east in team-b runs a controller on Lease {told}" + (
                " (with no --lease-namespace" if said else ": a run now") in err and (said or "") in err, (ns, err)
        else:
            assert code == 0 and err == "" and "would hand from " in out, (ns, err)


@pytest.mark.parametrize("automount, volume, path, elects", [
    (False, TOKEN, "//var/run/secrets/kubernetes.io/serviceaccount", ("team-b",)),
    (False, TOKEN, "/var/run/secrets/x/../kubernetes.io/serviceaccount", ("team-b",)),
    (True, ODD, "//var/run/secrets/kubernetes.io/serviceaccount", None),
    (False, TOKEN, SA_DIR + "/", ("team-b",)),
    (False, TOKEN, "/var/run/secrets/kubernetes.io/./serviceaccount/", ("team-b",)),
], ids=["double-slash", "dot-dot", "double-slash-beside-the-plugins", "trailing-slash", "dot"])
def test_a_mount_path_is_read_as_the_runtime_cleans_it(kube, capsys, automount, volume, path, elects):
    """The runtime cleans a mountPath (//var/run is /var/run, x/.. is nothing), which the API keeps as written: a
    token mounted at //var/run/secrets/kubernetes.io/serviceaccount was read as over no file, its controller taken
    for gputide's (no token mounted) and a hand-over of team-b's Lease went ahead under it; a ConfigMap there beside
    the token the admission plugin adds (its path as written is not the plugin's) was not read either. A trailing
    slash or a ./ was read cleaned already: a correct spec is not refused."""
    kube.add(mounted(without_pod_namespace("east", "team-b"), automount, (volume, path, None)))
    judged(capsys, elects, f"token (configMap) mounted over it at {path}")


def judged(capsys, elects: tuple[str, ...] | None, said: str) -> None:
    """A dry-run hand-over of gputide-controller in team-b, gputide and team-c finds deployment/east in team-b to
    elect in `elects` (with no --lease-namespace or POD_NAMESPACE), or, None, in any namespace, its volume `said`
    ("NAME (KIND) mounted over it at PATH") over the namespace file."""
    for ns in ("team-b", "gputide", "team-c"):
        code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--namespace", ns,
                                   "--dry-run")
        if elects is None:
            assert "runs a controller on Lease $(namespace file)/gputide-controller, which cannot be told here" in err \
                and f"its volume {said} may put any namespace there" in err, (ns, err)
        elif ns in elects:
            assert f"deployment/east in team-b runs a controller on Lease {ns}/gputide-controller: a run" in err, \
                (ns, err)
        else:
            assert code == 0 and err == "" and "would hand from " in out, (ns, err)


RUN_SA = "/run/secrets/kubernetes.io/serviceaccount"   # /var/run is a symlink to /run in the shipped image
EMPTY = {"name": "run", "emptyDir": {}}


@pytest.mark.parametrize("automount, mounts, elects, said", [
    (False, [(TOKEN, RUN_SA)], ("team-b",), None),
    (False, [(TOKEN, RUN_SA + "/../serviceaccount/")], ("team-b",), None),
    (False, [(ODD, RUN_SA)], None, f"token (configMap) mounted over it at {RUN_SA}"),
    (True, [(ODD, RUN_SA)], None, f"token (configMap) mounted over it at {RUN_SA}"),
    (None, [(ODD, RUN_SA)], None, f"token (configMap) mounted over it at {RUN_SA}"),
    (True, [(TOKEN, RUN_SA)], ("team-b",), None),
    (False, [(EMPTY, "/run")], None, "run (emptyDir) mounted over it at /run"),
    (True, [(EMPTY, "/run")], ("team-b",), None),
    (False, [(TOKEN, SA_DIR), ({**ODD, "name": "odd"}, RUN_SA)], None, f"odd (configMap) mounted over it at {RUN_SA}"),
    (False, [(TOKEN, RUN_SA), ({**ODD, "name": "odd"}, "/var/run/secrets/kubernetes.io")], None,
     "odd (configMap) mounted over it at /var/run/secrets/kubernetes.io"),
    (False, [(TOKEN, RUN_SA), (EMPTY, "/var")], None, "run (emptyDir) mounted over it at /var"),
], ids=["token", "token-unclean", "configMap", "configMap-beside-the-plugins", "configMap-token-left", "two-tokens",
        "emptyDir", "emptyDir-under-the-plugins", "configMap-over-a-token", "configMap-above-a-token-mounted-after",
        "emptyDir-at-var-hides-the-symlink"])
def test_a_mount_under_run_is_over_the_namespace_file_under_var_run(kube, capsys, automount, mounts, elects, said):
    """The controller opens /var/run/secrets/kubernetes.io/serviceaccount/namespace, and in the shipped image
    (python:3.11-slim-bookworm) /var/run is a symlink to /run, which the runtime follows as it mounts: a mount at
    /run/secrets/kubernetes.io/serviceaccount is over that file. Mounts were compared against /var/run alone: a pod
    with automountServiceAccountToken false mounting its own projected token there was taken for gputide's (no token),
    and a hand-over of team-b's Lease went ahead under its controller; a ConfigMap there naming team-c was missed the
    same way. The admission plugin skips its own mount only for one at exactly the token path as written, so a /run
    one sits beside its token: either may be read (refused as any where one is a ConfigMap). The runtime mounts the
    shallower path as written first, so a ConfigMap at /var/run/secrets/kubernetes.io may be mounted after (over) a
    token at /run/.../serviceaccount, one as deep as written; an own mount at /var hides the symlink, its emptyDir
    the file's."""
    kube.add(mounted(without_pod_namespace("east", "team-b"), automount, *((v, p, None) for v, p in mounts)))
    judged(capsys, elects, said)
    if elects:   # run for real: refused, nothing written
        code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--namespace", "team-b")
        assert code == 1 and out == "" and not writes(kube), err


def test_a_dry_run_controller_writes_no_floor_and_holds_up_only_by_its_lease(kube, capsys):
    """`gputide run --dry-run` acts through the DryRunActuator: it writes no floor and no record entry, as no writer.
    A preflight initContainer `gputide run --once --dry-run` (or a dry-run container) refused a hand-over, said to
    write as its Lease. With --leader-elect it still takes the Lease: refused while the Lease is held, as any holder
    is, and not once its renewal has expired. A flag the kubelet fills from outside may be anything but --dry-run."""
    dep = controller("east", "gputide")
    pod = dep["spec"]["template"]["spec"]
    preflight, app = {**pod["containers"][0], "name": "preflight"}, {"name": "app", "image": "nginx"}
    args = [a for a in preflight["args"] if a != "--leader-elect"]
    kube.add(dep)
    for init, flags in ((True, ["--once", "--dry-run"]), (True, ["--dry"]), (False, ["--dry-run"])):
        preflight["args"] = [*args, *flags]
        pod["initContainers"], pod["containers"] = ([preflight], [app]) if init else ([], [preflight])
        replaced(kube, dep)
        code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a", "--dry-run")
        assert code == 0 and err == "" and "1 HPA floor(s), 1 " in out, (init, flags, err)
    preflight["args"] = [*args, "--once", "--dry-run", "--leader-elect"]
    pod["initContainers"], pod["containers"] = [preflight], [app]
    replaced(kube, dep)
    kube.add(lease("gputide-controller", "east-7f9-x", 5))
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 1 and f"Lease {OLD} is held by east-7f9-x for " in err and not writes(kube), err
    assert "runs a controller" not in err, err
    kube.delete("leases", "gputide-controller", "gputide")
    kube.add(lease("gputide-controller", "east-7f9-x", 3600))   # its renewal expired
    preflight["args"] = [*args, "--once", "$(FLAGS)"]   # from a ConfigMap: --dry-run or not, unknown here
    preflight["env"] = [*preflight["env"], {"name": "FLAGS", "valueFrom": {"configMapKeyRef": {"name": "gputide",
                                                                                            "key": "FLAGS"}}}]
    replaced(kube, dep)
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 1 and "in its initContainer preflight, once at each start" in err and not writes(kube), err
    preflight["args"] = [*args, "--once", "--dry-run", "--leader-elect"]
    replaced(kube, dep)
    code, out, err = hand_over(capsys, "gputide-controller", "gputide-controller-a")
    assert code == 0 and err == "" and "1 HPA floor(s), 1 " in out, err
