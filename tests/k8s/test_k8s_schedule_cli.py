"""`gputide schedule`: the placement engine as the secondary scheduler, against the fake API server through a
kubeconfig, and its adapter (Kubernetes node views -> ClusterState) on its own."""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import FakeKube, node, pod

from balancer.app.scheduling import EnginePlacer, cluster_state, pod_request
from balancer.cli import main
from balancer.plan.placement.state import MILLI, NO_GPU

H100 = "NVIDIA-H100-80GB-HBM3"   # GPU feature discovery's nvidia.com/gpu.product label


def view(name, total, free, model=H100, cpu=(64000, 64000), mem=(262144, 262144), usable=None):
    return {"name": name, "gpu_model": model, "gpus_total": total, "gpus_free": free, "gpus_usable": usable,
            "cpu_milli_total": cpu[0], "cpu_milli_free": cpu[1], "memory_mib_total": mem[0],
            "memory_mib_free": mem[1]} | ({} if usable is not None else {"gpus_usable": free})


def test_node_views_become_a_cluster_state_with_used_and_reserved_gpus_and_catalogue_models():
    state = cluster_state([view("a", 8, 5, usable=3, cpu=(64000, 16000)), view("b", 2, 2, model="L40S"),
                           view("cpu", 0, 0, model="")])
    assert state.names == ("a", "b", "cpu") and state.models == ("H100-SXM", "L40S")
    assert state.gpu_free[0].tolist() == [MILLI] * 3 + [0] * 5            # 3 usable, the rest in use or reserved
    assert state.gpu_free[1].tolist() == [MILLI, MILLI] + [NO_GPU] * 6
    assert (state.gpu_free[2] == NO_GPU).all() and state.model.tolist() == [0, 1, -1]
    assert (state.cpu_total[0], state.cpu_free[0]) == (64000, 16000)


def test_a_pod_request_names_models_by_catalogue_key():
    req = {"name": "ml/p", "num_gpu": 2, "gpu_milli": 500, "cpu_milli": 4000, "memory_mib": 1024,
           "allowed_models": ("H100", "NVIDIA-A100-SXM4-80GB", "A100-SXM4-80GB")}
    p = pod_request(req)
    assert (p.num_gpu, p.gpu_milli, p.cpu_milli) == (2, MILLI, 4000)       # several GPUs are whole GPUs
    assert p.allowed_models == ("A100-SXM4-80GB", "H100")                  # unknown names kept as they are


def test_the_engine_packs_by_policy_and_never_breaks_a_model_constraint():
    nodes = [view("empty", 8, 8), view("half", 8, 4), view("l40s", 8, 8, model="L40S")]
    two = {"name": "ml/a", "num_gpu": 2, "gpu_milli": 1000, "cpu_milli": 1000, "memory_mib": 1024,
           "allowed_models": None}
    assert EnginePlacer("bestfit")(two, nodes) == "half"                   # the tightest fit
    only_h100 = dict(two, allowed_models=("H100-SXM",))
    assert EnginePlacer("gputide")(only_h100, nodes[2:]) is None           # only an L40S fits: no node
    assert EnginePlacer("gputide")(only_h100, nodes) in ("empty", "half")
    assert EnginePlacer("gputide")(two, []) is None


def test_nvlink_domains_come_from_the_label_else_the_catalogue():
    nodes = [view("l40s", 8, 8, model="NVIDIA-L40S"), view("h100", 8, 8), view("a100p", 8, 8, model="A100-PCIE-40GB"),
             dict(view("odd", 8, 8, model="weird"), labels={"gputide.io/nvlink-domain-size": "4"})]
    assert cluster_state(nodes).nvlink_domain.tolist() == [
        [0, 1, 2, 3, 4, 5, 6, 7],       # PCIe without NVLink: a domain per GPU
        [0] * 8,                        # an SXM board: one NVSwitch domain
        [0, 0, 1, 1, 2, 2, 3, 3],       # NVLink-bridged PCIe cards: pairs
        [0, 0, 0, 0, 1, 1, 1, 1]]       # the operator's label wins


def test_a_multi_gpu_pod_goes_to_an_nvlink_board_whatever_the_node_order():
    nodes = [view("l40s", 8, 8, model="NVIDIA-L40S"), view("h100", 8, 8)]
    four = {"name": "ml/t", "num_gpu": 4, "gpu_milli": 1000, "cpu_milli": 1000, "memory_mib": 1024,
            "allowed_models": None}
    assert EnginePlacer("gputide")(four, nodes) == EnginePlacer("gputide")(four, nodes[::-1]) == "h100"


def test_gputide_schedule_once_binds_its_pending_pods_by_policy(kube: FakeKube, kubeconfig, capsys):
    kube.add(node("h100-a", 8, model=H100))
    kube.add(node("h100-b", 8, model=H100))
    kube.add(node("l40s", 8, model="NVIDIA-L40S"))
    kube.add(pod("resident", "ml", gpus=4, node_name="h100-b", phase="Running"))
    kube.add(pod("resident-l40s", "ml", gpus=5, node_name="l40s", phase="Running"))  # the tightest, wrong model
    train = pod("train-0", "ml", gpus=2, scheduler="gputide", phase="Pending")
    train["metadata"]["annotations"] = {"gputide.io/gpu-spec": "H100-SXM"}
    kube.add(train)
    kube.add(pod("big", "ml", gpus=16, scheduler="gputide", phase="Pending"))     # fits nowhere
    kube.add(pod("theirs", "ml", gpus=1, phase="Pending"))                         # the default scheduler's
    assert main(["schedule", "--kubeconfig", kubeconfig, "--once", "--policy", "bestfit"]) == 0
    out = capsys.readouterr().out
    assert "ml/train-0 -> h100-b" in out
    assert "ml/big: no node fits (0/3 nodes are available: 3 Insufficient nvidia.com/gpu.)" in out
    assert kube.get("pods", "train-0", "ml")["spec"]["nodeName"] == "h100-b"       # the tightest H100
    assert "nodeName" not in kube.get("pods", "theirs", "ml")["spec"]
    assert len(kube.calls("POST", r"/binding$")) == 1


def test_a_pass_without_pending_pods_lists_no_nodes(kube: FakeKube, kubeconfig):
    kube.add(node("h100-a", 8, model=H100))
    assert main(["schedule", "--kubeconfig", kubeconfig, "--once"]) == 0
    assert not kube.calls("GET", r"/nodes$")


@pytest.mark.parametrize(("argv", "field"), [
    (["--policy", "best"], "--policy"),
    (["--interval", "0s"], "--interval"),
    (["--prometheus", "prometheus:9090"], "--prometheus"),
    (["--prometheus", "http://prometheus:9090", "--cluster", 'a"'], "--cluster"),
    (["--cluster", "east"], "--cluster"),
], ids=["unknown-policy", "zero-interval", "prometheus-without-scheme", "cluster-with-a-quote",
        "cluster-without-prometheus"])
def test_bad_input_exits_2_naming_the_flag(kube, kubeconfig, argv, field, capsys):
    assert main(["schedule", "--kubeconfig", kubeconfig, "--once", *argv]) == 2
    assert field in capsys.readouterr().err


def test_no_kubernetes_configuration_exits_2_naming_kubeconfig(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["schedule", "--once"]) == 2
    assert "--kubeconfig" in capsys.readouterr().err


def test_placement_matches_the_engine_on_a_random_cluster():
    """EnginePlacer's answer is what the engine's Scheduler picks on the same ClusterState (no adapter drift)."""
    from balancer.plan.placement import Scheduler, WorkloadMix

    rng = np.random.default_rng(3)
    nodes = [view(f"n{i}", 8, int(rng.integers(0, 9)), model=["H100-SXM", "L40S"][i % 2]) for i in range(12)]
    req = {"name": "p", "num_gpu": 1, "gpu_milli": 1000, "cpu_milli": 2000, "memory_mib": 4096,
           "allowed_models": None}
    placer = EnginePlacer("gputide")
    got = placer(req, nodes)
    state = cluster_state(nodes)
    mix = WorkloadMix.from_pods([pod_request(req)], include_cpu_only=False)
    want = Scheduler(state, "gputide", mix).place(pod_request(req))
    assert got == state.names[want.node]


def test_gputide_schedule_as_a_process_binds_reports_and_stops_cleanly(kube: FakeKube, kubeconfig):
    """The long-running scheduler: once its watches have synced, a pod created while it runs is bound at once,
    though the next poll is a minute away, and without listing anything; its metrics and probes answer; SIGTERM
    ends it at once with exit 0 and releases the Lease."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path
    from urllib.request import urlopen

    from test_k8s_run_process import free_port, sample

    from balancer.actuate.kubernetes import rfc3339

    def metrics() -> str:
        try:
            return urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            return ""

    def wait_for(check, what: str) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if check(text := metrics()):
                return text
            time.sleep(0.1)
        pytest.fail(f"{what}: rc {proc.poll()}\n{metrics()[-1500:]}")

    kube.add(node("h100-a", 8, model=H100))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "balancer.cli", "schedule", "--kubeconfig", kubeconfig, "--interval", "60s",
         "--metrics-port", str(port), "--leader-elect", "--lease-namespace", "gputide"],
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        resources = ("pending pods", "nodes", "bound pods")
        wait_for(lambda t: all(sample(t, f'gputide_kubernetes_watch_synced{{resource="{r}"}}') == 1
                               for r in resources), "the watches did not sync")
        def lists() -> int:
            return sum("watch=true" not in c.query for c in kube.calls("GET", r"/(pods|nodes)$"))

        listed = lists()
        created = time.monotonic()
        late = pod("late", "ml", gpus=1, scheduler="gputide", phase="Pending")
        late["metadata"]["creationTimestamp"] = rfc3339(time.time())
        kube.add(late)
        text = wait_for(lambda t: sample(t, 'gputide_scheduler_pods_total{result="bound"}') == 1,
                        "the pod was not bound")
        assert time.monotonic() - created < 30            # the pod's event, not the 60 s poll
        assert kube.get("pods", "late", "ml")["spec"]["nodeName"] == "h100-a"
        assert lists() == listed                          # read from the caches
        assert sample(text, "gputide_scheduler_leader") == 1 and sample(text, "gputide_scheduler_pending_pods") == 0
        assert sample(text, "gputide_scheduler_binding_latency_seconds_count") == 1
        assert urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).status == 200
    finally:
        stopped = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, out[-2000:]
    assert time.monotonic() - stopped < 15               # SIGTERM wakes the wait; no minute-long sleep
    lease = kube.get("leases", "gputide-scheduler", "gputide")
    assert lease is not None and not lease["spec"].get("holderIdentity"), lease   # released for the next replica


@pytest.mark.integration
def test_with_prometheus_the_scheduler_avoids_the_hot_node(kube: FakeKube, kubeconfig, prometheus_factory, capsys):
    """`--prometheus`: per-GPU headroom from the real Prometheus scraping the simulated fleet. Two equally free
    H100 nodes; the first listed has lost its cooling, so the pod goes to the other. Without `--prometheus` the
    nodes are a tie and the first listed gets it."""
    from balancer import fleet as fleet_mod
    from balancer.sim import SimCluster
    from balancer.telemetry.promserver import Target, default_rule_files
    from exporters.backends.sim import SimBackend
    from exporters.collector import GpuCollector
    from exporters.server import serve

    fleet = fleet_mod.from_dict({"apiVersion": "gputide/v1alpha1", "kind": "FleetSpec", "metadata": {"name": "s"},
                                 "spec": {"nodeGroups": [{"namePrefix": "h100-", "count": 2, "gpuModel": "H100-SXM",
                                                          "gpusPerNode": 4}]}}, "<test>")
    sim = SimCluster(fleet, seed=1, step_s=60.0)
    sim.degrade_cooling("h100-00", inlet_rise_c=30.0, resistance_factor=2.0)
    for _ in range(20):
        sim.step()
    exporter = serve(GpuCollector(SimBackend(sim)), port=0)
    try:
        prom = prometheus_factory([Target("gputide-exporter", f"127.0.0.1:{exporter.port}")],
                                  rule_files=default_rule_files(), scrape_interval="1s")
        prom.wait_for("count(gpu:temperature_headroom:celsius)",
                      lambda r: bool(r) and float(r[0]["value"][1]) == 8, timeout=30)
        for name in ("h100-00", "h100-01"):
            kube.add(node(name, 4, model=H100))
        kube.add(pod("p", "ml", gpus=1, scheduler="gputide", phase="Pending"))
        kube.add(pod("q", "ml", gpus=1, scheduler="gputide", phase="Pending"))
        kube.mutate("pods", "q", "ml", {"spec": {"schedulerName": "other"}})     # held back for the second run
        assert main(["schedule", "--kubeconfig", kubeconfig, "--once", "--prometheus", prom.url]) == 0
        assert "ml/p -> h100-01" in capsys.readouterr().out
        kube.mutate("pods", "q", "ml", {"spec": {"schedulerName": "gputide"}})
        kube.delete("pods", "p", "ml")
        assert main(["schedule", "--kubeconfig", kubeconfig, "--once"]) == 0
        assert "ml/q -> h100-00" in capsys.readouterr().out
    finally:
        exporter.close()
