"""Schedule: what the secondary scheduler's `EnginePlacer.place` costs per pending pod at 1,000 and 5,000 nodes.

`SecondaryScheduler.schedule_once` (balancer/actuate/k8s_scheduler.py) asks `place(pod_request, offered_nodes)`
once per pending pod, with fresh node dicts each time (the nodes the pod fits, each with its `gpus_usable`). This
benchmark replays that loop without the API server: a mixed fleet (H100 and A100 SXM boards, L40S, H100 and A100
PCIe cards, CPU-only nodes; a third of them partly used, a few with GPUs reserved or an NVLink label) and 200
pending pods of a mixed request mix (whole and shared single GPUs, 2/4/8-GPU pods, some pinned to a model,
CPU-only pods), each bound where `place` says so the next pod sees the node's GPUs, CPU and memory taken. Figure:
CPU time of one `place` call, median over the 200 pods (policy gputide); the best of 5 runs, each in its own
process. *Before*: the same measurement, in the same run and in turn with this tree's, of the tree at
`BEFORE_COMMIT` (exported with `git archive`), which rebuilt every per-node fact and the workload mix on every call;
both trees must pick the same nodes (the run fails otherwise).

*Per pass*: what `SecondaryScheduler.schedule_once` itself costs for `PASS_PODS` pending pods (filters, placing,
bookkeeping; the API server replaced by a stub that accepts every binding), CPU time of the whole pass, against
the tree at `PASS_BEFORE_COMMIT` (which filtered every node and rebuilt the placement state for every pod). A few
pods ask for 16 GPUs and fit nowhere, a fifth select a zone. Both trees must bind the same pods to the same nodes.

*Pod affinity*: the same pass on this tree with bound pods of many workloads, some keeping their replicas one per
host, and a share of the pending pods carrying that anti-affinity, against the pass without any (`affinity_pass`);
and with a share of the pending pods carrying preferred node and pod anti-affinity instead (`preferred_pass`).

    .venv/bin/python -m bench.bench_schedule
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import statistics
import time
from pathlib import Path

COMMAND = ".venv/bin/python -m bench.bench_schedule"
SIZES = (1000, 5000)
PODS = 200
RUNS = 5
BEFORE_COMMIT = "a017911"
PASS_PODS = 100
PASS_RUNS = 3
PASS_BEFORE_COMMIT = "487169e"
ROOT = Path(__file__).resolve().parents[1]

# (nvidia.com/gpu.product, GPUs, CPU milli, memory MiB, share of the fleet)
HARDWARE = (
    ("NVIDIA-H100-80GB-HBM3", 8, 224000, 2097152, 0.35),
    ("NVIDIA-A100-SXM4-80GB", 8, 128000, 1048576, 0.2),
    ("NVIDIA-L40S", 4, 64000, 524288, 0.2),
    ("NVIDIA-H100-PCIe", 2, 48000, 393216, 0.1),
    ("NVIDIA-A100-PCIE-40GB", 4, 64000, 524288, 0.1),
    ("", 0, 96000, 393216, 0.05),
)
# (num_gpu, gpu_milli, CPU milli, memory MiB, allowed models, share of the pods)
REQUESTS = (
    (1, 1000, 8000, 65536, None, 0.3),
    (1, 500, 4000, 32768, None, 0.1),
    (2, 1000, 16000, 131072, None, 0.15),
    (4, 1000, 32000, 262144, None, 0.1),
    (8, 1000, 96000, 1048576, ("H100-SXM",), 0.05),
    (1, 1000, 8000, 65536, ("NVIDIA-L40S", "L4"), 0.1),
    (0, 0, 2000, 8192, None, 0.2),
)


def fleet(n: int, seed: int = 0) -> list[dict]:
    """`n` node views shaped like `SecondaryScheduler.nodes_view`'s."""
    import numpy as np

    rng = np.random.default_rng(seed)
    kinds = rng.choice(len(HARDWARE), size=n, p=[h[-1] for h in HARDWARE])
    view = []
    for i, k in enumerate(kinds):
        product, gpus, cpu, mem, _ = HARDWARE[k]
        used = int(rng.integers(0, gpus + 1)) if gpus and rng.random() < 0.35 else 0
        labels = {"kubernetes.io/hostname": f"node-{i:05d}", "topology.kubernetes.io/zone": f"zone-{i % 3}",
                  "node.kubernetes.io/instance-type": f"type-{k}"}
        if gpus:
            labels |= {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)}
        if gpus == 8 and rng.random() < 0.05:
            labels["gputide.io/nvlink-domain-size"] = "4"
        view.append({
            "name": f"node-{i:05d}", "labels": labels, "gpu_model": product, "taints": [], "unschedulable": False,
            "gpus_total": gpus, "gpus_free": gpus - used,
            "cpu_milli_total": cpu, "cpu_milli_free": cpu - used * cpu // max(gpus, 1) // 2,
            "memory_mib_total": mem, "memory_mib_free": mem - used * mem // max(gpus, 1) // 4,
            "reservations": {"other/job": {"count": 1}} if used < gpus and rng.random() < 0.02 else {},
        })  # fmt: skip
    return view


def pods(count: int = PODS, seed: int = 1) -> list[dict]:
    """Pending pods' requests shaped like `SecondaryScheduler.pod_request`'s."""
    import numpy as np

    rng = np.random.default_rng(seed)
    kinds = rng.choice(len(REQUESTS), size=count, p=[r[-1] for r in REQUESTS])
    return [{"name": f"ml/p{i}", "num_gpu": REQUESTS[k][0], "gpu_milli": REQUESTS[k][1], "cpu_milli": REQUESTS[k][2],
             "memory_mib": REQUESTS[k][3], "allowed_models": REQUESTS[k][4]} for i, k in enumerate(kinds)]


def offered(view: list[dict], req: dict) -> list[dict]:
    """What `schedule_once` offers `place` for `req`: fresh dicts of the nodes it fits, with `gpus_usable`."""
    out = []
    for n in view:
        usable = n["gpus_free"] - sum(int(v.get("count", 0)) for v in n["reservations"].values())
        if (usable >= req["num_gpu"] and n["cpu_milli_free"] >= req["cpu_milli"]
                and n["memory_mib_free"] >= req["memory_mib"]):
            out.append(dict(n, gpus_usable=usable))
    return out


def bind(view: list[dict], name: str | None, req: dict) -> None:
    """Take the pod's GPUs, CPU and memory on the node `place` chose, as `schedule_once` does after binding."""
    for n in view:
        if n["name"] == name:
            n["gpus_free"] -= req["num_gpu"]
            n["cpu_milli_free"] -= req["cpu_milli"]
            n["memory_mib_free"] -= req["memory_mib"]


def measure_one(n: int, policy: str = "gputide") -> dict:
    from balancer.app.scheduling import EnginePlacer

    view, placer, cpu, answers = fleet(n), EnginePlacer(policy), [], []
    for req in pods():
        nodes = offered(view, req)
        c0 = time.process_time()
        name = placer(req, nodes)
        cpu.append(time.process_time() - c0)
        answers.append(name)
        bind(view, name, req)
    return {"nodes": n, "median": statistics.median(cpu), "first": cpu[0],
            "placed": sum(a is not None for a in answers),
            "answers": hashlib.sha256(json.dumps(answers).encode()).hexdigest()[:16]}


def rules(selector: dict) -> object:
    """A pod's node rules as the tree measured reads them: `NodeRules` (balancer/noderules.py) where it exists; the
    trees before it read the plain `tolerations` / `node_selector` / `node_affinity` keys, which are kept too."""
    try:
        from balancer.noderules import NodeRules
    except ImportError:
        return None
    return NodeRules.from_pod_spec({"nodeSelector": selector})


def pending(count: int = PASS_PODS, seed: int = 2) -> list[dict]:
    """Pending pods as `SecondaryScheduler.pending` gives them: `pods()` with their rules and owners, a few of
    them asking for more GPUs than any node has."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for i, req in enumerate(pods(count, seed)):
        name = req["name"].split("/")[1]
        if rng.random() < 0.03:
            req |= {"num_gpu": 16, "gpu_milli": 1000}
        out.append(req | {
            "namespace": "ml", "pod": name, "owner": "", "priority": 0, "created": "", "uid": f"uid-{i}",
            "tolerations": [], "node_affinity": [], "pod_affinity": False, "owned": frozenset({f"ml/{name}"}),
            "node_selector": {"topology.kubernetes.io/zone": "zone-1"} if rng.random() < 0.2 else {},
            "extended": {"pods": 1.0}, "preempt": True, "labels": {}, "group": None, "group_min": 0})  # fmt: skip
        out[-1]["rules"] = rules(out[-1]["node_selector"])   # the same rules as this tree reads them
    return out


APPS = 500               # workloads the bound pods of the affinity pass belong to
BOUND_PER_NODE = 4       # bound pods per node in the affinity pass
ANTI_SHARE = 0.2         # share of those workloads with required anti-affinity on kubernetes.io/hostname


def _anti(app: str) -> dict:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}]}}


def with_affinity(queue: list[dict], view: list[dict], share: float, seed: int = 3) -> list:
    """The affinity pass: `BOUND_PER_NODE` bound pods per node of `APPS` workloads (`ANTI_SHARE` of them keeping
    their replicas one per host), and `share` of the pending pods made replicas of those workloads, with their
    anti-affinity. Returns the bound pods (`k8s_reads.Usage`)."""
    import numpy as np

    from balancer.actuate.k8s_reads import Usage
    from balancer.noderules import PodAffinity

    rng = np.random.default_rng(seed)
    anti = {f"app-{a}" for a in range(APPS) if rng.random() < ANTI_SHARE}
    terms = {app: PodAffinity.from_spec("ml", {"affinity": _anti(app)}) for app in anti}
    bound = []
    for i, node in enumerate(view):
        for k in range(BOUND_PER_NODE):
            app = f"app-{int(rng.integers(APPS))}"
            bound.append(Usage(node["name"], 0, 0, 0, (), f"ml/b-{i}-{k}", 0, 0.0, (("app", app),),
                               terms[app].anti if app in terms else ()))
    for req in queue:
        if rng.random() < share:
            app = f"app-{int(rng.integers(APPS))}"
            req["labels"] = {"app": app}
            req["pod_affinity"] = terms.get(app) or PodAffinity.from_spec("ml", {"affinity": _anti(app)})
    return bound


def with_preferences(queue: list[dict], view: list[dict], share: float, seed: int = 4) -> list:
    """The preferred-affinity pass: the bound pods of `with_affinity` (none of the pending pods with required
    affinity), and `share` of the pending pods made replicas of those workloads that would rather run one per host
    (preferred anti-affinity to their own workload on kubernetes.io/hostname, weight 100) and in zone-1 (preferred
    node affinity, weight 50). Returns the bound pods."""
    import numpy as np

    from balancer.noderules import PREFERRED, Preferences

    bound = with_affinity(queue, view, 0.0)
    rng = np.random.default_rng(seed)
    zone = {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-1"]}]}
    for req in queue:
        if rng.random() < share:
            app = f"app-{int(rng.integers(APPS))}"
            req["labels"] = {"app": app}
            req["preferences"] = Preferences.from_spec("ml", {"affinity": {
                "nodeAffinity": {PREFERRED: [{"weight": 50, "preference": zone}]},
                "podAntiAffinity": {PREFERRED: [{"weight": 100, "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}}]}}})
    return bound


def measure_pass(n: int, policy: str = "gputide", affinity: float | None = None,
                 preferred: float | None = None) -> dict:
    """CPU time of one `schedule_once` over `pending()` on `fleet(n)`, every binding accepted. With `affinity` (a
    share of the pending pods), the pass of `with_affinity`; with `preferred`, that of `with_preferences`."""
    import copy
    from types import SimpleNamespace

    from kubernetes import client as k8s

    from balancer.actuate.k8s_scheduler import SecondaryScheduler
    from balancer.app.scheduling import EnginePlacer

    class Offline(SecondaryScheduler):
        """The scheduler with its reads given and its writes dropped: what is left is the pass itself."""

        def pending(self) -> list[dict]:
            return self.queue

        def nodes_view(self) -> list[dict]:
            return self.view

        def _tell_unschedulable(self, req: dict, message: str) -> None:
            pass

        def _event(self, req: dict, kind: str, reason: str, message: str) -> None:
            pass

    class Quiet:
        """Telling pods what was done (`k8s_tell.Teller`, in the trees that have one): nothing said."""

        def keep(self, pods) -> None:
            pass

        def unschedulable(self, req: dict, message: str) -> None:
            pass

        def scheduled(self, req: dict, node: str) -> None:
            pass

    class Accepting:
        """The API: every binding accepted at once."""

        core = SimpleNamespace(create_namespaced_pod_binding=None)

        def __call__(self, *args, **kwargs) -> dict:
            return {}

        def deadline(self, *args, **kwargs):   # a pass's time limits (the trees since 3216f34): none here
            return contextlib.nullcontext()

        def reserve(self, *args, **kwargs):
            return contextlib.nullcontext()

    sched = Offline(k8s.ApiClient(), "gputide", EnginePlacer(policy))
    sched.api, sched.tell = Accepting(), Quiet()
    view = fleet(n)
    for node in view:
        node |= {"extended_total": {"pods": 110.0}, "extended_free": {"pods": 110.0}}
    sched.queue, sched.view = pending(), copy.deepcopy(view)
    if affinity is not None:
        sched._listed_bound = with_affinity(sched.queue, sched.view, affinity)
    if preferred is not None:
        sched._listed_bound = with_preferences(sched.queue, sched.view, preferred)
    c0 = time.process_time()
    results = sched.schedule_once()
    cpu = time.process_time() - c0
    return {"nodes": n, "cpu": cpu, "placed": sum(v is not None for v in results.values()),
            "answers": hashlib.sha256(json.dumps(sorted(results.items())).encode()).hexdigest()[:16]}


def _best(runs: list[dict], key: str = "median") -> list[dict]:
    """Per size, the run with the lowest figure (each run a process; a burst of other load only slows some)."""
    return [min((r for r in runs if r["nodes"] == n), key=lambda r: r[key]) for n in SIZES]


def _same(now: list[dict], before: list[dict]) -> None:
    for a, b in zip(now, before, strict=True):
        if a["answers"] != b["answers"]:
            raise RuntimeError(f"{a['nodes']} nodes: the trees placed the pods differently ({a} vs {b})")


def per_pass() -> str:
    from bench.trees import now_and_before, section

    now, before = now_and_before("bench_schedule", PASS_BEFORE_COMMIT,
                                 [f"measure_pass({n})" for n in SIZES for _ in range(PASS_RUNS)])
    _same(now, before)
    now, before = _best(now, "cpu"), _best(before, "cpu")
    return section(
        "Schedule: one pass of SecondaryScheduler.schedule_once (balancer/actuate/k8s_scheduler.py)",
        f"Command: `{COMMAND}`. CPU time of one pass over {PASS_PODS} pending pods (the same fleet and request mix, "
        "3 % asking for 16 GPUs, a fifth selecting a zone): filters, placement (policy gputide) and bookkeeping, "
        f"the API server replaced by a stub that accepts every binding. {PASS_RUNS} runs per size and tree, each "
        f"in its own process, the trees in turn; the best run shown. Before = the tree at `{PASS_BEFORE_COMMIT}` "
        "(every node filtered and the placement state rebuilt for every pod), same run; both trees bound the same "
        "pods to the same nodes.",
        ["nodes", "pods bound", "CPU per pass", "per pod", "before: per pass", "before: per pod", "speed-up"],
        [[f"{a['nodes']:,}", f"{a['placed']} of {PASS_PODS}", f"{a['cpu'] * 1e3:.0f} ms",
          f"{a['cpu'] / PASS_PODS * 1e3:.2f} ms", f"{b['cpu'] * 1e3:.0f} ms", f"{b['cpu'] / PASS_PODS * 1e3:.2f} ms",
          f"{b['cpu'] / a['cpu']:.1f}x"] for a, b in zip(now, before, strict=True)],
    )


AFFINITY_SHARES = (0.0, 0.3, 1.0)


def affinity_pass() -> str:
    """The cost of required pod (anti-)affinity in a pass: this tree, against the same pass without any."""
    from bench.trees import measured, section

    rows = []
    for n in SIZES:
        base = min((measured(ROOT, "bench_schedule", f"measure_pass({n})") for _ in range(PASS_RUNS)),
                   key=lambda r: r["cpu"])
        for share in AFFINITY_SHARES:
            r = min((measured(ROOT, "bench_schedule", f"measure_pass({n}, affinity={share})")
                     for _ in range(PASS_RUNS)), key=lambda r: r["cpu"])
            rows.append([f"{n:,}", f"{share:.0%}", f"{r['placed']} of {PASS_PODS}", f"{r['cpu'] * 1e3:.0f} ms",
                         f"{base['cpu'] * 1e3:.0f} ms", f"{r['cpu'] / base['cpu']:.2f}x"])
    return section(
        "Schedule: a pass with required pod affinity (balancer/actuate/k8s_podaffinity.py)",
        f"Command: `{COMMAND}`. The per-pass measurement above on this tree, with {BOUND_PER_NODE} bound pods per "
        f"node of {APPS} workloads, {ANTI_SHARE:.0%} of which keep their replicas one per host (required "
        "anti-affinity on kubernetes.io/hostname), and a share of the pending pods made replicas of those workloads "
        "with their anti-affinity. Baseline = the same pass with no bound pods and no affinity, same run, same tree. "
        f"{PASS_RUNS} runs each, each in its own process; the best run shown.",
        ["nodes", "pending pods with affinity", "pods bound", "CPU per pass", "baseline", "ratio"], rows)


PREFERRED_SHARES = (0.0, 0.3, 1.0)


def preferred_pass() -> str:
    """The cost of preferred node and pod (anti-)affinity in a pass: this tree, against the same pass without any."""
    from bench.trees import measured, section

    rows = []
    for n in SIZES:
        runs = {share: min((measured(ROOT, "bench_schedule", f"measure_pass({n}, preferred={share})")
                            for _ in range(PASS_RUNS)), key=lambda r: r["cpu"]) for share in PREFERRED_SHARES}
        base = runs[0.0]
        rows += [[f"{n:,}", f"{share:.0%}", f"{r['placed']} of {PASS_PODS}", f"{r['cpu'] * 1e3:.0f} ms",
                  f"{base['cpu'] * 1e3:.0f} ms", f"{r['cpu'] / base['cpu']:.2f}x"] for share, r in runs.items()]
    return section(
        "Schedule: a pass with preferred affinity (balancer/actuate/k8s_preferred.py)",
        f"Command: `{COMMAND}`. The per-pass measurement above on this tree, with the bound pods of the required "
        "affinity pass (none of the pending pods with required affinity), and a share of the pending pods made "
        "replicas of those workloads that would rather run one per host (preferred anti-affinity on "
        "kubernetes.io/hostname, weight 100) and in one zone (preferred node affinity, weight 50), scored over "
        "every node they fit. Baseline = the same pass with no pending pod carrying preferences (0 %), same run, "
        f"same tree. {PASS_RUNS} runs each, each in its own process; the best run shown.",
        ["nodes", "pending pods with preferences", "pods bound", "CPU per pass", "baseline", "ratio"], rows)


def main() -> str:
    from bench.trees import now_and_before, section

    runs = [f"measure_one({n})" for n in SIZES for _ in range(RUNS)]
    now, before = now_and_before("bench_schedule", BEFORE_COMMIT, runs)
    _same(now, before)
    now, before = _best(now), _best(before)
    return per_pass() + "\n" + affinity_pass() + "\n" + preferred_pass() + "\n" + section(
        "Schedule: EnginePlacer.place per pending pod (balancer/app/scheduling.py)",
        f"Command: `{COMMAND}`. CPU time of one `place(pod_request, offered_nodes)` call (policy gputide), median "
        f"over {PODS} pending pods of a mixed request mix, each bound where it was placed before the next is "
        "offered the nodes it fits (fresh dicts per pod, as `SecondaryScheduler.schedule_once` makes them); a mixed "
        "fleet of H100/A100 SXM, L40S, H100/A100 PCIe and CPU-only nodes, a third partly used. Each run in its own "
        f"process, {RUNS} per size and tree, the trees in turn; the best run shown. Before = the tree at "
        f"`{BEFORE_COMMIT}`, same run; both trees placed every pod on the same node.",
        ["nodes", "pods placed", "first call", "median per pod", "before: first", "before: median",
         "speed-up (median)"],
        [[f"{a['nodes']:,}", f"{a['placed']} of {PODS}", f"{a['first'] * 1e3:.1f} ms", f"{a['median'] * 1e3:.2f} ms",
          f"{b['first'] * 1e3:.1f} ms", f"{b['median'] * 1e3:.2f} ms", f"{b['median'] / a['median']:.1f}x"]
         for a, b in zip(now, before, strict=True)],
    )


if __name__ == "__main__":
    print(main())
