"""The Kubernetes API, listing vs watching: what one planning cycle of the controller, and one pass of the
secondary scheduler, cost.

`KubernetesWorkloads` gives the planner each GPU pod's owner, priority and elastic bounds. Baseline (same run):
the list path, one `list pods` per cycle (what `--once`, and every cycle before the watch has synced, does;
with the shipped TTL of max(interval, 30 s) a 30 s controller lists every cycle). Measured: the watch path
(`watch=True`, what `gputide run` uses), with one pod changed before every cycle, so each cycle sees a new
generation of the cache (its worst case; an unchanged cache costs nothing at all).

The API server is the fake one (tests/k8s/fakeapi.py) in a child process, so the figures are the controller's
own CPU (decode, convert, copy, qualify), not the server's. Pods are the fake's builder pods with an owner, a
few labels, annotations, env and status conditions (about 1.6 KiB of JSON each; real pods with managedFields
are larger, which only widens the gap).

The scheduler (`SecondaryScheduler`, balancer/actuate/k8s_scheduler.py) is measured on the same pods, bound to
nodes of 10 GPUs (2 free each), with one new pending pod per pass and a first-fit `place` (the placement engine's
own cost is bench_schedule's): the baseline lists pending pods, nodes and bound pods each pass (what it did
before, and still does with `--once`); the watch path reads its three caches. Latency is from the pod's creation
to its binding, with the scheduler running its loop at the shipped 2 s interval.

    .venv/bin/python -m bench.bench_k8s
"""

from __future__ import annotations

import contextlib
import copy
import multiprocessing as mp
import os
import random
import statistics
import time
from collections.abc import Iterator
from typing import Any

from balancer.actuate.k8s_workloads import KubernetesWorkloads
from balancer.app.soak import load_fake_kube

COMMAND = ".venv/bin/python -m bench.bench_k8s"
SIZES = (2_000, 20_000)


def _pods(n: int) -> list[dict[str, Any]]:
    base = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "", "namespace": "", "uid": "8b4a3c2e-6a1b-4c1e-9a55-3b1f2f1c1a00",
                     "labels": {"app": "train", "team": "research", "pod-template-hash": "7d9f8c6b5"},
                     "annotations": {"gputide.io/elastic-min": "1", "gputide.io/elastic-max": "8",
                                     "kubectl.kubernetes.io/restartedAt": "2024-01-01T00:00:00Z"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "", "controller": True,
                                          "uid": "0c1d2e3f-4a5b-6c7d-8e9f-a0b1c2d3e4f5"}]},
        "spec": {"priority": 10, "nodeName": "node-0", "containers": [{
            "name": "main", "image": "registry.example/train:1.2.3",
            "env": [{"name": f"VAR_{i}", "value": f"value-{i}"} for i in range(8)],
            "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "8", "memory": "64Gi"}}}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")]},
    }  # fmt: skip
    out = []
    for i in range(n):
        p = copy.deepcopy(base)
        p["metadata"].update(name=f"train-{i // 8}-w{i % 8}", namespace=f"ns-{i // 8 % 40}",
                             resourceVersion=str(i + 1), creationTimestamp="2024-01-01T00:00:00Z")
        p["metadata"]["ownerReferences"][0]["name"] = f"train-{i // 8}"
        p["spec"]["nodeName"] = f"node-{i // 8}"
        out.append(p)
    return out


def _nodes(n: int) -> list[dict[str, Any]]:
    """Nodes for `n` bound pods, 8 on each: 10 GPUs each, so 2 are free."""
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": f"node-{i}", "resourceVersion": "1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "10", "cpu": "128", "memory": "1Ti"}}}
        for i in range((n + 7) // 8)]


def _serve(n: int, conn) -> None:
    kube = load_fake_kube()()
    for p in _pods(n):
        kube.objects[("pods", p["metadata"]["namespace"], p["metadata"]["name"])] = p
    for node in _nodes(n):
        kube.objects[("nodes", "", node["metadata"]["name"])] = node
    kube._rv = n
    conn.send(kube.url)
    conn.recv()   # until the parent is done
    kube.close()


def _cycle_cpu(call, cycles: int, before=None) -> tuple[float, float]:
    """(median CPU s, median wall s) of `call()` over `cycles`, `before()` (untimed) ahead of each."""
    cpu, wall = [], []
    for _ in range(cycles):
        if before is not None:
            before()
        c0, t0 = time.process_time(), time.perf_counter()
        call()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    return statistics.median(cpu), statistics.median(wall)


@contextlib.contextmanager
def _fake_api(n: int) -> Iterator[Any]:
    """An ApiClient of the fake API server holding `n` bound pods and their nodes, in a child process."""
    from balancer.actuate.kubernetes import build_api_client

    parent, child = mp.Pipe()
    server = mp.get_context("fork").Process(target=_serve, args=(n, child), daemon=True)
    server.start()
    try:
        yield build_api_client(host=parent.recv())   # what a deployment runs: no hidden urllib3 retries in the figures
    finally:
        parent.send("done")
        server.join(10)


def measure(n: int, cycles: int) -> dict[str, float]:
    from kubernetes import client as k8s

    with _fake_api(n) as api:
        listing = KubernetesWorkloads(api, ttl_s=0.0)
        assert len(listing()) == n
        list_cpu, list_wall = _cycle_cpu(listing, cycles)
        core = k8s.CoreV1Api(api)
        watching = KubernetesWorkloads(api, ttl_s=0.0, watch=True)
        watching()
        while not watching.watch.synced:
            time.sleep(0.05)
        flips = iter(range(10**9))

        def change_owner() -> None:   # another writer relabels a pod's owner; wait until the watch delivers it
            generation = watching.watch.generation
            core.patch_namespaced_pod("train-0-w0", "ns-0",
                                      {"metadata": {"labels": {"gputide.io/job": f"train-x{next(flips)}"}}},
                                      _content_type="application/merge-patch+json")
            deadline = time.monotonic() + 30
            while watching.watch.generation == generation and time.monotonic() < deadline:
                time.sleep(0.005)

        idle_cpu, _ = _cycle_cpu(watching, cycles)
        watch_cpu, watch_wall = _cycle_cpu(watching, cycles, before=change_owner)
        assert len(watching()) == n
        watching.close()
        body = len(core.list_pod_for_all_namespaces(_preload_content=False).data)
    return {"pods": n, "list_cpu": list_cpu, "list_wall": list_wall, "watch_cpu": watch_cpu,
            "watch_wall": watch_wall, "idle_cpu": idle_cpu, "bytes": body}


def _first_fit(request: dict, nodes: list[dict]) -> str | None:
    return nodes[0]["name"] if nodes else None


def measure_scheduler(n: int, passes: int, latencies: int = 5) -> dict[str, float]:
    import threading

    from kubernetes import client as k8s

    from balancer.actuate.k8s_scheduler import SecondaryScheduler

    with _fake_api(n) as api:
        core = k8s.CoreV1Api(api)
        names = iter(range(10**9))

        def new_pod() -> str:
            name = f"pending-{next(names)}"
            core.create_namespaced_pod("bench", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "bench"},
                "spec": {"schedulerName": "gputide", "containers": [{"name": "main", "image": "x", "resources": {
                    "limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]},
                "status": {"phase": "Pending"}})
            return name

        def latency(sched: SecondaryScheduler) -> float:
            """Median seconds from a pod's creation to its binding, the scheduler running its 2 s loop."""
            stop = threading.Event()

            def loop() -> None:
                while not stop.is_set():
                    sched.schedule_once()
                    sched.wait_for_work(2.0)

            thread = threading.Thread(target=loop, daemon=True)
            thread.start()
            out, phase = [], random.Random(0)
            for _ in range(latencies):
                time.sleep(phase.uniform(0, 2.0))   # pods arrive at any point of the scheduler's 2 s cycle
                t0 = time.perf_counter()
                name = new_pod()
                while not core.read_namespaced_pod(name, "bench", _preload_content=False).json()["spec"].get(
                        "nodeName"):
                    time.sleep(0.005)
                out.append(time.perf_counter() - t0)
            stop.set()
            sched.wake()
            thread.join(60)
            return statistics.median(out)

        listing = SecondaryScheduler(api, "gputide", _first_fit)
        list_cpu, list_wall = _cycle_cpu(listing.schedule_once, passes, before=new_pod)
        list_latency = latency(listing)
        watching = SecondaryScheduler(api, "gputide", _first_fit, watch=True).start()
        while not all(w.synced for w in watching.watches.values()):
            time.sleep(0.05)

        def new_pod_seen() -> None:
            name = new_pod()
            while all(r["pod"] != name for r in watching.pending()):
                time.sleep(0.005)

        watch_cpu, watch_wall = _cycle_cpu(watching.schedule_once, passes, before=new_pod_seen)
        watch_latency = latency(watching)
        watching.close()
    return {"pods": n, "list_cpu": list_cpu, "list_wall": list_wall, "watch_cpu": watch_cpu,
            "watch_wall": watch_wall, "list_latency": list_latency, "watch_latency": watch_latency}


def main() -> str:
    rows = [measure(n, 5) for n in SIZES]
    sched = [measure_scheduler(n, 5) for n in SIZES]
    lines = [
        "## Pod metadata from the Kubernetes API: list per cycle vs watch (balancer/actuate/k8s_watch.py)", "",
        "Controller CPU per planning cycle for `KubernetesWorkloads()`, median of 5 cycles; the fake API server runs "
        "in a child process, so its own work is not counted. Baseline: one `list pods` per cycle. Watch: one pod's "
        "owner changed before every cycle (the worst case); 'unchanged' = no event since the last cycle.", "",
        "| pods | list body | baseline: list per cycle (CPU / wall) | watch, a change every cycle (CPU / wall) "
        "| watch, unchanged | CPU ratio |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['pods']:,} | {r['bytes'] / 2**20:.1f} MiB | {r['list_cpu'] * 1e3:.0f} ms / "
                     f"{r['list_wall'] * 1e3:.0f} ms | {r['watch_cpu'] * 1e3:.1f} ms / {r['watch_wall'] * 1e3:.1f} ms "
                     f"| {r['idle_cpu'] * 1e3:.2f} ms | {r['list_cpu'] / max(r['watch_cpu'], 1e-6):.0f}x |")
    big = rows[-1]
    lines += ["", f"At {big['pods']:,} pods a list costs the controller {big['list_cpu'] * 1e3:.0f} ms of CPU and the "
              f"API server a {big['bytes'] / 2**20:.0f} MiB response per cycle; the watch costs "
              f"{big['watch_cpu'] * 1e3:.1f} ms when a pod changed and nothing when none did, and the API server only "
              "the changed pods. Machine: "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end of the run.", "",
              f"Command: `{COMMAND}`", "",
              "## Secondary scheduler: a pass listing everything vs a pass on watched caches "
              "(balancer/actuate/k8s_scheduler.py)", "",
              "Scheduler CPU and wall time of one `schedule_once()` binding one new pod, median of 5 passes, and the "
              "median time from a pod's creation to its binding (5 pods, created at seeded random points of the 2 s "
              "cycle) with the scheduler looping at the shipped 2 s interval. Baseline (same run, same server): a "
              "pass lists pending pods, nodes and bound pods. "
              "Watch: the pass reads the three caches and only binds.", "",
              "| bound pods | nodes | baseline pass (CPU / wall) | watch pass (CPU / wall) | CPU ratio "
              "| creation to binding: baseline | watch |",
              "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sched:
        lines.append(f"| {r['pods']:,} | {(r['pods'] + 7) // 8:,} | {r['list_cpu'] * 1e3:.0f} ms / "
                     f"{r['list_wall'] * 1e3:.0f} ms | {r['watch_cpu'] * 1e3:.1f} ms / {r['watch_wall'] * 1e3:.1f} ms "
                     f"| {r['list_cpu'] / max(r['watch_cpu'], 1e-6):.0f}x | {r['list_latency']:.2f} s "
                     f"| {r['watch_latency']:.3f} s |")
    lines += ["", f"Command: `{COMMAND}`"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(main())
