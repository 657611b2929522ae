"""The controller's policy ConfigMap is mounted so that an edit reaches the running controller, which re-reads the
file when it changes (balancer/app/policy_reload.py): a `subPath` mount would freeze the file at pod start."""

from __future__ import annotations

from pathlib import Path

import yaml

from balancer.cli import build_parser

BASE = Path(__file__).resolve().parents[2] / "deploy" / "base"


def test_the_policy_configmap_is_mounted_whole_where_the_controller_reads_it():
    docs = list(yaml.safe_load_all((BASE / "controller.yaml").read_text()))
    deploy = next(d for d in docs if d and d["kind"] == "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v.get("configMap", {}).get("name") == "gputide-policy")
    (container,) = [c for c in pod["containers"] if any(m["name"] == volume["name"] for m in c["volumeMounts"])]
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert "subPath" not in mount   # the kubelet never updates a subPath mount
    policy_arg = next(a for a in container["args"] if a.startswith("--policy="))
    assert Path(policy_arg.split("=", 1)[1]).parent == Path(mount["mountPath"])
    args = build_parser().parse_args(container["args"])
    assert args.policy == policy_arg.split("=", 1)[1] and not args.once   # long-running: it follows edits


def test_the_scheduler_reads_the_controllers_policy_for_its_emergency_stop():
    """`gputide schedule --controller-policy` is how its preemption learns of spec.safety.emergencyStop; without it
    the shipped scheduler evicted pods while the operator had stopped the controller."""
    path = BASE.parent / "components" / "scheduler" / "scheduler.yaml"
    deploy = next(d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v.get("configMap", {}).get("name") == "gputide-policy")
    (container,) = pod["containers"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert "subPath" not in mount and mount.get("readOnly")
    args = build_parser().parse_args(container["args"])
    assert Path(args.controller_policy).parent == Path(mount["mountPath"])
    assert Path(args.controller_policy).name == "policy.yaml"
