"""`EnginePlacer` with its caches picks exactly the node the plain construction picks.

The placer remembers per-node facts across calls (catalogue model and NVLink domain size by the node's model,
domain label and GPU count) and keeps the workload mix up to date one pod at a time (`MixWindow`). The reference
below is the placer as first written: `cluster_state` of every view and `WorkloadMix.from_pods` of the remembered
pods on every call. Both see the same sequence of calls, so a fact or a mix that went stale shows as a different
node (or state); node names come back with other models, labels and GPU counts on purpose.

A scheduling pass (`EnginePlacer.start_pass`) keeps one placement snapshot for many pods and commits each binding
into it; it must answer what the per-pod rebuild answers, pod after pod, whichever nodes each pod is offered,
whether its binding succeeds or fails, and with GPU facts that change or fail during the pass.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from balancer.app.scheduling import DOMAIN_LABEL, EnginePlacer, cluster_state, pod_request
from balancer.errors import TelemetryUnavailable
from balancer.model import NodeGpuFacts
from balancer.plan.placement import (
    POLICIES,
    FragCache,
    MixWindow,
    PodRequest,
    Scheduler,
    WorkloadMix,
    get_policy,
)
from balancer.plan.placement.nodestats import NodeStats
from tests.fuzz.fuzzing import examples


class Reference:
    """The straightforward placer: every node fact and the mix rebuilt from scratch on every call."""

    def __init__(self, policy: str, mix_window: int = 1000, seed: int = 0) -> None:
        self.policy = get_policy(policy)
        self.seen: deque[PodRequest] = deque(maxlen=mix_window)
        self.rng = np.random.default_rng(seed)

    def __call__(self, request, nodes):
        pod = pod_request(request)
        self.seen.append(pod)
        if not nodes:
            return None
        state = cluster_state(nodes)
        mix = (WorkloadMix.from_pods(self.seen, include_cpu_only=self.policy.mix_cpu_only,
                                     **dict(self.policy.mix_options)) if self.policy.needs_mix else None)
        placement = Scheduler(state, self.policy, mix,
                              rng=self.rng if self.policy.name == "random" else None).place(pod)
        return state.names[placement.node] if placement is not None else None


def same_state(a, b) -> None:
    assert a.names == b.names and a.models == b.models
    for field in ("cpu_total", "mem_total", "cpu_free", "mem_free", "gpu_free", "model", "nvlink_domain", "taints"):
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == y.dtype and np.array_equal(x, y), field


def view(name, model="NVIDIA-H100-80GB-HBM3", total=8, free=8, usable=None, domain=None, cpu=(64000, 64000),
         mem=(262144, 262144)):
    node = {"name": name, "gpu_model": model, "gpus_total": total, "gpus_free": free, "cpu_milli_total": cpu[0],
            "cpu_milli_free": cpu[1], "memory_mib_total": mem[0], "memory_mib_free": mem[1],
            "labels": {"nvidia.com/gpu.product": model} | ({DOMAIN_LABEL: domain} if domain is not None else {})}
    return node | {"gpus_usable": free if usable is None else usable}


def request(gpus=1, milli=1000, cpu=1000, mem=1024, models=None, name="ml/p"):
    return {"name": name, "num_gpu": gpus, "gpu_milli": milli, "cpu_milli": cpu, "memory_mib": mem,
            "allowed_models": models}


MODELS = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S", "NVIDIA-A100-PCIE-40GB", "H100-SXM",
          "L40S", "NVIDIA H100 PCIe", "weird-gpu", "", None]
numbers = st.one_of(st.integers(0, 9), st.sampled_from([None, -2, 8.0, 2.5, True, "4"]))


@st.composite
def node_views(draw):
    total = draw(st.one_of(st.integers(0, 8), numbers))
    node = {"name": draw(st.sampled_from(["n0", "n1", "n2", "n3", "n4"])), "gpu_model": draw(st.sampled_from(MODELS)),
            "gpus_total": total, "gpus_free": draw(st.integers(0, 8)),
            "cpu_milli_total": draw(st.sampled_from([16000, 64000, 0, None])),
            "cpu_milli_free": draw(st.sampled_from([0, 4000, 16000, 64000, -1])),
            "memory_mib_total": draw(st.sampled_from([65536, 262144])),
            "memory_mib_free": draw(st.sampled_from([1024, 65536, 262144, None])),
            "labels": draw(st.sampled_from([{}, None, {DOMAIN_LABEL: "4"}, {DOMAIN_LABEL: " 2 "},
                                            {DOMAIN_LABEL: "0"}, {DOMAIN_LABEL: "x"}, {DOMAIN_LABEL: 4.0},
                                            {DOMAIN_LABEL: 2}]))}  # fmt: skip
    if draw(st.booleans()):
        node["gpus_usable"] = draw(numbers)
    if draw(st.integers(0, 9)) == 0:
        node["gpus_total"] = draw(numbers)   # a value numpy will not read as integers: the int() path
    return node


requests = st.builds(
    request, gpus=st.sampled_from([0, 1, 1, 2, 4, 8]), milli=st.sampled_from([1000, 500, 250]),
    cpu=st.sampled_from([0, 1000, 8000, 32000]), mem=st.sampled_from([0, 1024, 65536]),
    models=st.sampled_from([None, ("H100-SXM",), ("NVIDIA-L40S", "A100-SXM4-80GB"), ("weird-gpu",), ("T4",)]),
)
calls = st.lists(st.tuples(requests, st.lists(node_views(), max_size=7)), min_size=1, max_size=10)


@pytest.mark.parametrize("policy", sorted(POLICIES))
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=calls, window=st.sampled_from([1, 3, 1000]), seed=st.integers(0, 3))
def test_the_cached_placer_picks_what_the_plain_construction_picks(policy, calls, window, seed):
    placer, reference = EnginePlacer(policy, mix_window=window, seed=seed), Reference(policy, window, seed)
    for req, nodes in calls:
        if nodes:
            same_state(placer.state(nodes), cluster_state(nodes))
        assert placer(req, nodes) == reference(req, nodes)


def test_a_node_that_comes_back_changed_under_the_same_name_is_read_afresh():
    placer = EnginePlacer("gputide")
    two = request(gpus=2)
    versions = [
        [view("a"), view("b", model="NVIDIA-L40S", total=4, free=4)],
        [view("a", model="NVIDIA-L40S", total=4, free=4), view("b")],                 # models swapped
        [view("a", domain="2"), view("b", domain="4")],                               # NVLink labels added
        [view("a", total=2, free=2), view("b", total=0, free=0, model="")],           # fewer GPUs, then none
        [view("a", model="weird-gpu"), view("b", model="NVIDIA-A100-PCIE-40GB", total=4, free=4)],
        [view("a"), view("b", model="NVIDIA-L40S", total=4, free=4)],                 # back to the first
    ]
    reference = Reference("gputide")
    for nodes in versions:
        same_state(placer.state(nodes), cluster_state(nodes))
        assert placer(two, nodes) == reference(two, nodes)
    assert placer.state(versions[2]).nvlink_domain[1].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert placer.state(versions[3]).models == ("H100-SXM",)
    assert placer.state(versions[4]).models == ("A100-PCIE-40GB", "weird-gpu")


def test_nodes_without_gpus_or_with_an_unknown_model_keep_their_own_models():
    placer = EnginePlacer("gputide")
    nodes = [view("cpu", total=0, free=0, model=""), view("nolabel", model=""), view("odd", model="weird-gpu"),
             view("h100")]
    state = placer.state(nodes)
    same_state(state, cluster_state(nodes))
    assert state.models == ("H100-SXM", "weird-gpu", "unknown") and state.model.tolist() == [-1, 2, 1, 0]
    assert placer(request(gpus=0), nodes) == Reference("gputide")(request(gpus=0), nodes)
    assert placer(request(models=("H100-SXM",)), nodes) == "h100"


def test_the_random_policy_stays_seeded():
    nodes = [view(f"n{i}", free=i % 9) for i in range(40)]
    run = [p(request(), nodes) for p in [EnginePlacer("random", seed=7)] for _ in range(20)]
    assert run == [p(request(), nodes) for p in [Reference("random", seed=7)] for _ in range(20)]
    assert run == [p(request(), nodes) for p in [EnginePlacer("random", seed=7)] for _ in range(20)]
    assert run != [p(request(), nodes) for p in [EnginePlacer("random", seed=8)] for _ in range(20)]
    assert len(set(run)) > 1


pods = st.builds(PodRequest, cpu_milli=st.sampled_from([1000, 2000, 8000]), memory_mib=st.sampled_from([512, 4096]),
                 num_gpu=st.sampled_from([0, 1, 2]), gpu_milli=st.sampled_from([250, 1000]),
                 allowed_models=st.sampled_from([None, ("A",), ("A", "B")]))


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(pods, max_size=40), st.integers(0, 8), st.booleans(), st.sampled_from([1.0, 0.9, 0.5, 0.0]),
       st.booleans(), st.booleans())
def test_the_mix_window_equals_the_mix_of_its_last_pods(arrivals, size, cpu_only, coverage, key_cpu, memory):
    options = {"include_cpu_only": cpu_only, "coverage": coverage, "key_cpu": key_cpu, "memory": memory}
    window = MixWindow(size, **options)
    for k, pod in enumerate(arrivals):
        window.append(pod)
        got, want = window.mix(), WorkloadMix.from_pods(arrivals[max(k + 1 - size, 0):k + 1] if size else [],
                                                        **options)
        assert got.allowed == want.allowed
        for field in ("cpu", "mem", "num_gpu", "milli", "weight"):
            x, y = getattr(got, field), getattr(want, field)
            assert x.dtype == y.dtype and np.array_equal(x, y), field


# ---- a pass: one snapshot, bindings committed into it ------------------------------------------------------

@st.composite
def pass_views(draw):
    """A pass's view: the node dicts `SecondaryScheduler.nodes_view` makes (integer free resources, which the
    bindings take from), with the hardware drawn as oddly as above."""
    nodes = []
    for k in range(draw(st.integers(1, 7))):
        node = draw(node_views()) | {"name": f"n{k}", "gpus_free": draw(st.integers(-1, 8)),
                                     "cpu_milli_free": draw(st.sampled_from([0, 4000, 16000, 64000, -1])),
                                     "memory_mib_free": draw(st.sampled_from([1024, 65536, 262144]))}
        node["gpus_usable"] = node["gpus_free"] - draw(st.sampled_from([0, 0, 1]))   # a reservation for another
        nodes.append(node)
    return nodes


facts_tables = st.dictionaries(st.sampled_from([f"n{k}" for k in range(7)]), st.builds(
    NodeGpuFacts, st.dictionaries(st.integers(0, 8), st.sampled_from([2.0, 15.5, 30.0])),
    st.frozensets(st.integers(0, 8), max_size=4)), max_size=5)
# per pod: (request, offered nodes as booleans over the view, the binding: "ok", "409" or "error")
pass_pods = st.lists(st.tuples(requests, st.lists(st.booleans(), min_size=7, max_size=7),
                               st.sampled_from(["ok", "ok", "ok", "409", "error"])), min_size=1, max_size=12)


class Facts:
    """GPU facts that change at every read and sometimes fail (as Prometheus does), the same for every placer."""

    def __init__(self, tables) -> None:
        self.tables, self.reads = tables, 0

    def __call__(self):
        self.reads += 1
        table = self.tables[self.reads % len(self.tables)]
        if table is None:
            raise TelemetryUnavailable("prometheus down")
        return table


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def bind(node, request) -> None:
    """What `SecondaryScheduler` does to the view once the API accepted a binding."""
    for key, taken in (("gpus_free", request["num_gpu"]), ("gpus_usable", request["num_gpu"]),
                       ("cpu_milli_free", request["cpu_milli"]), ("memory_mib_free", request["memory_mib"])):
        node[key] -= taken


def in_step(session) -> None:
    """The pass's snapshot holds what one built afresh from its view holds: the state, the engine's per-node
    aggregates and the fragmentation statistics (the class ids may differ, the classes may not)."""
    if session.snapshot is None:
        return
    fresh = session.placer.state(session.view)
    if session.table is not None:
        session.table.apply(fresh)
    kept = session.snapshot
    same_state(kept.state, fresh)
    assert np.array_equal(kept.state.temp_headroom, fresh.temp_headroom, equal_nan=True)
    stats = NodeStats(fresh)
    for field in ("idle", "busy", "domain_busy", "full_in_domain", "rep_slot", "rep_free", "domain_size"):
        assert np.array_equal(getattr(kept.stats, field), getattr(stats, field)), field
    if kept.frag is not None:
        frag = FragCache(fresh, kept.frag.mix)
        for field in ("count", "below", "total", "frag"):
            assert np.array_equal(getattr(kept.frag, field), getattr(frag, field)), field
        ids, want = kept.frag.classes.id, frag.classes.id
        assert np.array_equal(ids[:, None] == ids[None, :], want[:, None] == want[None, :])


@pytest.mark.parametrize("policy", sorted(POLICIES))
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(view=pass_views(), pods=pass_pods, window=st.sampled_from([1, 3, 1000]), seed=st.integers(0, 3),
       tables=st.one_of(st.none(), st.lists(st.one_of(st.none(), facts_tables), min_size=1, max_size=3)))
def test_a_pass_with_its_bindings_committed_picks_what_a_rebuild_per_pod_picks(policy, view, pods, window, seed,
                                                                              tables):
    clocks = Clock(), Clock()
    placers = [EnginePlacer(policy, mix_window=window, seed=seed, clock=clock, facts_ttl_s=2.0,
                            gpu_facts=Facts(tables) if tables else None) for clock in clocks]
    plain = Reference(policy, window, seed) if tables is None else None
    session = placers[1].start_pass(view)
    for req, offer, binding in pods:
        offered = [i for i in range(len(view)) if offer[i]]
        want = placers[0](req, [dict(view[i]) for i in offered])   # fresh dicts per pod, as before
        if plain is not None:
            assert plain(req, [view[i] for i in offered]) == want
        assert session.place(req, offered) == want
        if want is not None and binding == "ok":   # a 409 or a failed binding changes nothing
            i = next(i for i in offered if view[i]["name"] == want)
            bind(view[i], req)
            session.bound(i)
            in_step(session)
        for clock in clocks:
            clock.now += 1.0   # the facts are read again every other pod


def test_a_node_whose_hardware_changed_during_a_pass_is_read_afresh():
    nodes = [view("a"), view("b", model="NVIDIA-L40S", total=4, free=4)]
    session, reference = EnginePlacer("gputide").start_pass(nodes), EnginePlacer("gputide")
    two = request(gpus=2)
    assert session.place(two, [0, 1]) == reference(two, [dict(n) for n in nodes]) == "a"
    nodes[0] |= {"gpu_model": "NVIDIA-L40S", "gpus_total": 2, "gpus_free": 2, "gpus_usable": 2}
    session.bound(0)
    assert session.snapshot is None                       # read again at the next pod, not patched
    assert session.place(two, [0, 1]) == reference(two, [dict(n) for n in nodes])
    assert session.snapshot.state.models == ("L40S",) and session.snapshot.state.gpu_count.tolist() == [2, 4]
