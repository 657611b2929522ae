"""The vectorised filters, candidates and FGD deltas agree with a plain per-node reference on random clusters.

The reference reads the Kubernetes and Alibaba v2023 semantics off one node at a time: CPU and memory fit, every
taint tolerated, a GPU pod only on a node with GPUs of a model its gpu_spec names (empty: any), `num_gpu` GPUs each
with `gpu_milli` free (a share of one GPU when num_gpu is 1, whole GPUs when more), CPU-only pods anywhere, GPU-less
nodes included. Clusters hold partly used GPUs, nodes without GPUs, models no pod names and pods naming models no
node has; with and without thermal readings, so both of the Scheduler's slot-candidate paths run.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.plan.placement import (
    POLICIES,
    ClusterState,
    PodRequest,
    Scheduler,
    WorkloadMix,
    node_fragmentation,
)
from balancer.plan.placement.unplaceable import unplaceable

MODELS = ("T4", "V100M16", "A100")
FREE = (0, 1, 100, 250, 500, 999, 1000, 1000, 1000)

node_st = st.tuples(
    st.integers(0, 16000), st.integers(0, 32000), st.lists(st.sampled_from(FREE), max_size=5),
    st.sampled_from(MODELS), st.sampled_from((0, 0, 1, 2, 3)), st.sampled_from((False, False, False, True)),
)
pod_st = st.builds(
    lambda cpu, mem, gpus, milli, spec, tol: PodRequest(cpu, mem, gpus, milli if gpus == 1 else 1000, spec, tol),
    st.integers(0, 8000), st.integers(0, 16000), st.sampled_from((0, 1, 1, 1, 2, 4)), st.integers(1, 1000),
    st.sampled_from([None, ("T4",), ("A100", "V100M16"), ("H100",), ("H100", "T4")]), st.integers(0, 3),
)


def _cluster(nodes, used: bool) -> ClusterState:
    """nodes: (cpu, memory, free milli per GPU, model, taint bits, with thermal readings)."""
    s = ClusterState.from_nodes([n[0] for n in nodes], [n[1] for n in nodes], [len(n[2]) for n in nodes],
                                [n[3] if n[2] else None for n in nodes])
    for i, n in enumerate(nodes):
        s.gpu_free[i, : len(n[2])] = n[2]
        s.taints[i] = n[4]
        if n[5]:
            s.temp_headroom[i, : len(n[2])] = np.linspace(5.0, 25.0, len(n[2]))
    if used:  # CPU and memory partly taken, as GPU use is
        s.cpu_free[:] = s.cpu_total // 2
        s.mem_free[:] = s.mem_total * 3 // 4
    return s


def _fits(s: ClusterState, node: int, pod: PodRequest) -> bool:
    if s.cpu_free[node] < pod.cpu_milli or s.mem_free[node] < pod.memory_mib or s.taints[node] & ~pod.tolerations:
        return False
    if pod.num_gpu == 0:
        return True
    if s.model[node] < 0 or (pod.allowed_models is not None and s.models[s.model[node]] not in pod.allowed_models):
        return False
    return sum(1 for free in s.gpu_free[node] if free >= 0 and free >= pod.gpu_milli) >= pod.num_gpu


def _expected_frag(s: ClusterState, mix: WorkloadMix) -> np.ndarray:
    return node_fragmentation(s.gpu_free, s.cpu_free, s.mem_free, mix.model_ok(s), mix) @ mix.weight


@settings(max_examples=150, deadline=None)
@given(st.lists(node_st, min_size=1, max_size=6), st.lists(pod_st, min_size=1, max_size=8),
       st.sampled_from(sorted(POLICIES)), st.booleans())
def test_filters_candidates_and_fgd_deltas_match_the_per_node_reference(nodes, pods, policy, used):
    s = _cluster(nodes, used)
    mix = WorkloadMix.from_pods(pods)
    sched = Scheduler(s, policy, mix, rng=np.random.default_rng(0))
    for pod in pods:
        want = [n for n in range(s.n_nodes) if _fits(s, n, pod)]
        assert sched.feasible_nodes(pod).tolist() == want
        c = sched.candidates(pod)
        if pod.num_gpu == 1:  # every (node, free milli) a fitting slot offers is a candidate, and nothing else
            slots = {(n, int(f)) for n in want for f in s.gpu_free[n] if f >= pod.gpu_milli}
            assert {(int(n), int(v)) for n, v in zip(c.node, c.value, strict=True)} == slots
            assert all(s.gpu_free[n, k] == v for n, k, v in zip(c.node, c.slot, c.value, strict=True))
        if sched.frag is not None and len(c):
            before, delta = _expected_frag(s, mix), sched.frag.delta(c.node, c.value, pod)
            for k in range(len(c)):
                node = int(c.node[k])
                after = s.copy()
                taken = (int(c.slot[k]),) if pod.num_gpu == 1 else sched.whole_gpu_slots(node, pod.num_gpu)
                after.assign(node, taken, pod.gpu_milli, pod.cpu_milli, pod.memory_mib)
                assert abs(_expected_frag(after, mix)[node] - before[node] - delta[k]) < 1e-6
        placement = sched.schedule(pod)
        assert (placement is None) == (not want)
        if placement is not None:
            assert placement.node in want and len(set(placement.slots)) == pod.num_gpu


@settings(max_examples=150, deadline=None)
@given(st.lists(node_st, min_size=1, max_size=6), pod_st)
def test_unplaceable_is_what_no_empty_node_can_take(nodes, pod):
    s = _cluster([(*n[:4], 0, False) for n in nodes], used=False)
    s.gpu_free[s.gpu_exists] = 1000
    unfit = unplaceable(s, [pod])
    assert (len(unfit) == 1) == (Scheduler(s, "bestfit").place(pod) is None)
    if unfit:
        assert unfit[0].field in ("gpu_spec", "num_gpu", "cpu_milli", "memory_mib")


def test_a_cpu_only_type_with_a_gpu_spec_fits_where_the_filters_place_it():
    """A CPU-only pod runs on any node (GpuModelFit): FGD's measure must not count a node of another model as one
    it cannot use, or every idle GPU there reads as fragmented for it."""
    s = _cluster([(32000, 64000, [1000, 1000], "V100M16", 0, False), (32000, 64000, [1000, 1000], "T4", 0, False)],
                 used=False)
    cpu_only = PodRequest(1000, 1000, 0, 0, ("T4",))
    mix = WorkloadMix.from_pods([cpu_only, PodRequest(1000, 1000, 1, 500)])
    assert Scheduler(s, "gputide", mix).feasible_nodes(cpu_only).tolist() == [0, 1]
    assert node_fragmentation(s.gpu_free, s.cpu_free, s.mem_free, mix.model_ok(s), mix)[:, 0].tolist() == [0, 0]
