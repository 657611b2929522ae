"""overlays/sharded's hand-over of HPA floors and gputide-replicas entries (audit s33a12): a controller gives back
only what names it as its writer (k8s_hpa.owned_by), and the unsharded controller's floors name
gputide/gputide-controller, which no shard is. After the switch a floor whose service later left gputide's management
stayed raised for good (a shard's give-back said "left to it"), and the same going back to unsharded.
hand-over-floors.sh renames the writer, nothing else; run against a fake kubectl here, and read back with the
controller's own rules (floor_restore_patch, floored_namespaces, to_give_back)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_deploy_manifests import ROOT, one
from test_deploy_shards import OVERLAY, SHARDS, _args, _controllers
from test_deploy_shards_install import comment

from balancer.actuate.k8s_deploy_record import Entry, entries, to_give_back
from balancer.actuate.k8s_hpa import (
    HPA_FLOOR_ANNOTATION,
    HPA_FLOOR_OWNER_ANNOTATION,
    HPA_OWN_MIN_ANNOTATION,
    floor_restore_patch,
    floored_namespaces,
)

SCRIPT = ROOT / "deploy" / OVERLAY / "hand-over-floors.sh"
OLD, SHARD_A, SHARD_B = "gputide/gputide-controller", "gputide/gputide-controller-a", "gputide/gputide-controller-b"

# kubectl as the script uses it, on a JSON file of HPAs, Deployments and ConfigMaps; resourceVersions checked
FAKE_KUBECTL = textwrap.dedent("""\
    import json, os, sys
    path = os.environ["FAKE_KUBE"]
    state = json.load(open(path))
    argv = sys.argv[1:]
    ns = None
    if argv[:1] == ["-n"]:
        ns, argv = argv[1], argv[2:]
    state["calls"].append(argv)

    def save():
        json.dump(state, open(path, "w"))

    def bump(obj):
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)

    if argv[:2] == ["get", "deployment"]:
        print("\\n".join(f"deployment.apps/{d}" for d in state["deployments"] if d == f"{ns}/{argv[2]}"))
    elif argv[:2] == ["get", "hpa"]:
        print(json.dumps({"items": state["hpas"]}))
        for h in state["hpas"]:   # someone writes the HPA just after the list
            if h["metadata"]["name"] == os.environ.get("FAKE_RACE"):
                bump(h)
    elif argv[:2] == ["annotate", "hpa"]:
        (h,) = [h for h in state["hpas"] if (h["metadata"]["namespace"], h["metadata"]["name"]) == (ns, argv[2])]
        rv = next(a.split("=", 1)[1] for a in argv if a.startswith("--resource-version="))
        if rv != h["metadata"]["resourceVersion"]:
            save()
            sys.exit("Error from server (Conflict): the object has been modified")
        key, value = argv[-1].split("=", 1)
        h["metadata"].setdefault("annotations", {})[key] = value
        bump(h)
    elif argv[:2] == ["get", "configmap"]:
        cm = state["configmaps"].get(f"{ns}/{argv[2]}")
        print(json.dumps(cm) if cm else "")
    elif argv[:2] == ["replace", "-f"]:
        new = json.load(sys.stdin)
        key = f"{new['metadata']['namespace']}/{new['metadata']['name']}"
        if new["metadata"]["resourceVersion"] != state["configmaps"][key]["metadata"]["resourceVersion"]:
            save()
            sys.exit("Error from server (Conflict): the object has been modified")
        bump(new)
        state["configmaps"][key] = new
    else:
        save()
        sys.exit(f"fake kubectl: unexpected {sys.argv[1:]}")
    save()
    """)


def hpa(ns: str, name: str, owner: str | None, floor: int = 6, own: int = 2) -> dict:
    notes = {HPA_OWN_MIN_ANNOTATION: str(own), HPA_FLOOR_ANNOTATION: str(floor),
             **({HPA_FLOOR_OWNER_ANNOTATION: owner} if owner else {})}
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": "10", "annotations": notes},
            "spec": {"minReplicas": floor, "maxReplicas": 10,
                     "scaleTargetRef": {"kind": "Deployment", "name": name}}}


def installed(deployments=()) -> dict:
    """What the unsharded controller left, and a shard wrote since: a floor and a record entry of each writer."""
    record = {f"{ns}.{name}": Entry(2, 1, owner, ns, name).text()
              for ns, name, owner in (("chat", "llm", OLD), ("search", "embed", SHARD_B), ("web", "old", None))}
    record["hand.edited"] = "{not json"
    return {"calls": [], "deployments": list(deployments),
            "hpas": [hpa("chat", "llm", OLD), hpa("search", "embed", SHARD_B), hpa("web", "old", None),
                     {"metadata": {"namespace": "web", "name": "plain", "resourceVersion": "3"},
                      "spec": {"minReplicas": 1, "maxReplicas": 4, "scaleTargetRef": {"name": "plain"}}}],
            "configmaps": {"gputide/gputide-replicas": {
                "apiVersion": "v1", "kind": "ConfigMap", "data": record,
                "metadata": {"name": "gputide-replicas", "namespace": "gputide", "resourceVersion": "7"}}}}


def hand_over(tmp_path: Path, state: dict, *args: str, race: str = "") -> tuple[subprocess.CompletedProcess, dict]:
    if shutil.which("jq") is None or shutil.which("bash") is None:
        pytest.skip("bash and jq needed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "kubectl").write_text(f"#!{sys.executable}\n{FAKE_KUBECTL}")
    (bin_dir / "kubectl").chmod(0o755)
    (tmp_path / "state.json").write_text(json.dumps(state))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "FAKE_KUBE": str(tmp_path / "state.json"), "FAKE_RACE": race}
    done = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)
    return done, json.loads((tmp_path / "state.json").read_text())


def _hpas(state: dict) -> dict[str, dict]:
    return {h["metadata"]["name"]: h for h in state["hpas"]}


def _record(state: dict) -> dict:
    return state["configmaps"]["gputide/gputide-replicas"]


def test_a_shard_leaves_the_unsharded_controllers_floors_until_they_are_handed_over(tmp_path):
    state = installed()
    llm = _hpas(state)["llm"]
    assert floor_restore_patch(llm, SHARD_A) == (None, f"floor set by {OLD}, not by {SHARD_A}: left to it")
    assert "chat.llm" not in to_give_back(entries(_record(state)), None, (), SHARD_A)

    done, after = hand_over(tmp_path, state, "gputide-controller", "gputide-controller-a")
    assert done.returncode == 0, done.stderr
    assert "1 HPA floor(s), 1 gputide-replicas entr" in done.stdout
    hpas = _hpas(after)
    # shard a now gives the floor back once its service leaves management: the operator's own 2, the record gone
    body, what = floor_restore_patch(hpas["llm"], SHARD_A)
    assert body == {"metadata": {"annotations": dict.fromkeys((HPA_OWN_MIN_ANNOTATION, HPA_FLOOR_ANNOTATION,
                                                               HPA_FLOOR_OWNER_ANNOTATION))},
                    "spec": {"minReplicas": 2}}, what
    assert floored_namespaces({"items": after["hpas"]}, (), SHARD_A) == ("chat", "web")
    assert floored_namespaces({"items": after["hpas"]}, ("llm",), SHARD_A) == ("web",)   # managed: kept
    # the floor itself, and every other HPA, as they were
    assert {k: v for k, v in hpas["llm"].items() if k != "metadata"} == {
        k: v for k, v in _hpas(state)["llm"].items() if k != "metadata"}
    for name in ("embed", "old", "plain"):
        assert hpas[name] == _hpas(state)[name], name
    # the record: the old controller's entry is shard a's, the rest byte for byte as they were
    before, record = _record(state)["data"], _record(after)["data"]
    assert {k for k in record if record[k] != before[k]} == {"chat.llm"}
    assert entries(_record(after))["chat.llm"] == Entry(2, 1, SHARD_A, "chat", "llm")
    assert to_give_back(entries(_record(after)), None, (), SHARD_A) == ["chat.llm", "web.old"]
    assert to_give_back(entries(_record(after)), None, (), SHARD_B) == ["search.embed", "web.old"]


def test_back_to_unsharded_both_shards_floors_are_handed_to_the_controller(tmp_path):
    state = installed()
    for shard in ("gputide-controller-a", "gputide-controller-b"):
        done, state = hand_over(tmp_path, state, shard, "gputide-controller")
        assert done.returncode == 0, done.stderr
    owners = {n: h["metadata"]["annotations"].get(HPA_FLOOR_OWNER_ANNOTATION) for n, h in _hpas(state).items()
              if "annotations" in h["metadata"]}
    assert owners == {"llm": OLD, "embed": OLD, "old": None}
    assert to_give_back(entries(_record(state)), None, (), OLD) == ["chat.llm", "search.embed", "web.old"]


def test_refused_while_the_old_controller_runs_and_nothing_changes(tmp_path):
    """A running controller writes its own name again at its next floor: the hand-over waits for its deletion."""
    state = installed(deployments=["gputide/gputide-controller"])
    done, after = hand_over(tmp_path, state, "gputide-controller", "gputide-controller-a")
    assert done.returncode == 1 and "delete it first" in done.stderr
    assert {k: v for k, v in after.items() if k != "calls"} == {k: v for k, v in state.items() if k != "calls"}
    assert after["calls"] == [["get", "deployment", "gputide-controller", "--ignore-not-found", "-o", "name"]]


def test_a_write_between_the_read_and_the_hand_over_fails_it_instead_of_being_lost(tmp_path):
    done, after = hand_over(tmp_path, installed(), "gputide-controller", "gputide-controller-a", race="llm")
    assert done.returncode != 0 and "Conflict" in done.stderr
    assert _hpas(after)["llm"]["metadata"]["annotations"][HPA_FLOOR_OWNER_ANNOTATION] == OLD


def test_nothing_of_the_controllers_is_a_no_op(tmp_path):
    state = installed()
    state["configmaps"] = {}
    done, after = hand_over(tmp_path, state, "gputide-controller-c", "gputide-controller")
    assert done.returncode == 0, done.stderr
    assert after["hpas"] == state["hpas"] and "0 HPA floor(s), 0 gputide-replicas" in done.stdout
    assert not [c for c in after["calls"] if c[0] in ("annotate", "replace")]


def test_the_comments_switch_steps_hand_the_floors_over_between_delete_and_apply():
    """Both ways: unsharded to a shard after deleting the controller and before applying the shards, and each shard's
    back to the controller (its --lease-name) after deleting the shards."""
    text = comment()
    lease = _args(one("base", "Deployment", "gputide-controller")).lease_name
    shard_leases = {d["metadata"]["name"] for d in _controllers().values()}
    assert shard_leases == set(SHARDS)
    steps = re.findall(r"deploy/overlays/sharded/hand-over-floors\.sh (\S+) (\S+)", text)
    assert steps[0][0] == lease and steps[0][1] in shard_leases
    assert sorted(f for f, t in steps[1:] if t == lease) == sorted(shard_leases) and len(steps) == 1 + len(SHARDS)
    first = text.index("hand-over-floors.sh")
    assert text.index("delete deployment/gputide-controller --cascade=foreground") < first < text.index(
        "kubectl apply -k")
    assert text.index("Back to unsharded") < text.index(f"hand-over-floors.sh {sorted(shard_leases)[0]}")
