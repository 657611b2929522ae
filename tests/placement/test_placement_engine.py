"""Filters, scores and named policies on small clusters whose right answer is checked by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.plan.placement import (
    POLICIES,
    PodRequest,
    Scheduler,
    WorkloadMix,
    parse_gpu_spec,
    resolve_models,
)
from tests.placement.conftest import cluster

MIX = WorkloadMix.from_pods([PodRequest(4000, 8000, 1, 1000)] * 3 + [PodRequest(4000, 8000, 1, 500)])


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("V100M16|V100M32", ("V100M16", "V100M32")),
        (" T4 ", ("T4",)),
        ("", None),
        (float("nan"), None),
        (None, None),
        ("A100||A100", ("A100",)),
    ],
    ids=["two models", "spaces trimmed", "empty means any", "nan means any", "none means any", "duplicates"],
)
def test_gpu_spec_parsing(spec, expected):
    assert parse_gpu_spec(spec) == expected


def test_unknown_model_names_are_reported_and_match_nothing():
    mask, unknown = resolve_models(("H200", "T4"), ("T4", "V100M16"))
    assert mask.tolist() == [True, False]
    assert unknown == ("H200",)


CASES = [
    # (name, nodes, pod, policy, expected node, expected slots)
    (
        "fgd fills the half-used GPU with a half pod",
        [(32000, 64000, [1000, 500], "T4")],
        PodRequest(1000, 1000, 1, 500),
        "fgd",
        0,
        (1,),
    ),
    (
        "fgd keeps the whole free node for whole-GPU demand",
        [(32000, 64000, [1000, 1000], "T4"), (32000, 64000, [500, 0], "T4")],
        PodRequest(1000, 1000, 1, 500),
        "fgd",
        1,
        (0,),
    ),
    (
        "model constraint excludes the better fit",
        [(32000, 64000, [500], "T4"), (32000, 64000, [1000], "V100M16")],
        PodRequest(1000, 1000, 1, 500, ("V100M16",)),
        "fgd",
        1,
        (0,),
    ),
    (
        "cpu filter skips a node without cpu",
        [(500, 64000, [1000], "T4"), (32000, 64000, [1000], "T4")],
        PodRequest(1000, 1000, 1, 1000),
        "bestfit",
        1,
        (0,),
    ),
    (
        "memory filter skips a node without memory",
        [(32000, 100, [1000], "T4"), (32000, 64000, [1000], "T4")],
        PodRequest(1000, 1000, 1, 1000),
        "bestfit",
        1,
        (0,),
    ),
    (
        "multi-GPU pods need enough whole GPUs",
        [(32000, 64000, [1000, 900], "T4"), (32000, 64000, [1000, 1000], "T4")],
        PodRequest(1000, 1000, 2, 1000),
        "gputide",
        1,
        (0, 1),
    ),
    (
        "bestfit packs onto the fuller node",
        [(32000, 64000, [1000, 1000], "T4"), (32000, 64000, [0, 1000], "T4")],
        PodRequest(1000, 1000, 1, 1000),
        "bestfit",
        1,
        (1,),
    ),
    (
        "gpupacking prefers a partly used GPU",
        [(32000, 64000, [1000, 1000], "T4"), (32000, 64000, [1000, 600], "T4")],
        PodRequest(1000, 1000, 1, 300),
        "gpupacking",
        1,
        (1,),
    ),
    (
        "cpu-only pods go anywhere, even GPU-less nodes",
        [(32000, 64000, [], None)],
        PodRequest(1000, 1000),
        "gputide",
        0,
        (),
    ),
]


@pytest.mark.parametrize(
    ("nodes", "pod", "policy", "node", "slots"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_hand_checked_placements(nodes, pod, policy, node, slots):
    placement = Scheduler(cluster(*nodes), policy, MIX).place(pod)
    assert placement is not None
    assert (placement.node, placement.slots) == (node, slots)


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (PodRequest(1000, 1000, 1, 600), "no GPU has 600 milli free"),
        (PodRequest(1000, 1000, 1, 100, ("H100",)), "the allowed model is not in the cluster"),
        (PodRequest(64000, 1000), "no node has the CPU"),
        (PodRequest(1000, 1000, 3, 1000), "no node has three GPUs"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_no_fit_returns_none(pod, why):
    state = cluster((32000, 64000, [500, 500], "T4"), (32000, 64000, [0, 200], "V100M16"))
    assert Scheduler(state, "gputide", MIX).place(pod) is None, why


def test_taints_need_tolerations():
    state = cluster((32000, 64000, [1000], "T4"))
    state.taints[0] = 0b10
    sched = Scheduler(state, "bestfit")
    assert sched.place(PodRequest(1000, 1000, 1, 1000)) is None
    assert sched.place(PodRequest(1000, 1000, 1, 1000, tolerations=0b10)) is not None


def test_topology_keeps_multi_gpu_pods_inside_one_nvlink_domain():
    state = cluster((64000, 64000, [1000, 1000, 1000, 0], "A100"))
    state.nvlink_domain[0] = [0, 1, 1, 0]
    placement = Scheduler(state, "gputide", MIX).place(PodRequest(1000, 1000, 2, 1000))
    assert placement.slots == (1, 2)


def test_thermal_headroom_breaks_ties_towards_the_cooler_gpu():
    state = cluster((64000, 64000, [1000, 1000], "A100"))
    state.temp_headroom[0] = [5.0, 30.0]
    placement = Scheduler(state, "gputide", MIX).place(PodRequest(1000, 1000, 1, 1000))
    assert placement.slots == (1,)


def test_heterogeneity_keeps_small_jobs_off_the_scarce_model():
    state = cluster((64000, 64000, [1000], "H100"), *[(64000, 64000, [1000], "T4")] * 3)
    placement = Scheduler(state, "gputide", MIX).place(PodRequest(1000, 1000, 1, 1000))
    assert state.models[state.model[placement.node]] == "T4"


node_st = st.tuples(
    st.integers(0, 16000),
    st.integers(0, 32000),
    st.lists(st.sampled_from([0, 250, 500, 1000]), max_size=4),
    st.sampled_from(["T4", "V100M16", "A100"]),
)
pod_st = st.builds(
    lambda c, m, g, gm, spec: PodRequest(c, m, g, gm if g == 1 else 1000, spec),
    st.integers(0, 8000),
    st.integers(0, 16000),
    st.integers(0, 3),
    st.integers(1, 1000),
    st.sampled_from([None, ("T4",), ("V100M16", "A100"), ("H100",)]),
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(node_st, min_size=1, max_size=6),
    st.lists(pod_st, max_size=25),
    st.sampled_from(sorted(POLICIES)),
)
def test_placement_never_overcommits_and_respects_gpu_spec(nodes, pods, policy):
    state = cluster(*[(c, m, g, model if g else None) for c, m, g, model in nodes])
    sched = Scheduler(
        state, policy, WorkloadMix.from_pods(pods or [PodRequest(1, 1)]), rng=np.random.default_rng(0)
    )
    for pod in pods:
        placement = sched.schedule(pod)
        if placement is not None and pod.num_gpu:
            assert (
                pod.allowed_models is None or state.models[state.model[placement.node]] in pod.allowed_models
            )
            assert len(set(placement.slots)) == pod.num_gpu
        assert (state.cpu_free >= 0).all() and (state.mem_free >= 0).all()
        assert (state.gpu_free[state.gpu_exists] >= 0).all()
        assert (state.gpu_free[state.gpu_exists] <= 1000).all()


def test_assign_refuses_to_overcommit():
    state = cluster((1000, 1000, [300], "T4"))
    with pytest.raises(ValueError, match="over-commits"):
        state.assign(0, (0,), 400, 0, 0)
    with pytest.raises(ValueError, match="over-commits"):
        state.assign(0, (), 0, 2000, 0)


@pytest.mark.parametrize(
    ("nodes", "expected", "why"),
    [
        (
            [(32000, 64000, [1000, 1000], "T4"), (32000, 64000, [0, 0], "T4")],
            1,
            "a node with no idle GPU loses nothing to a CPU-only pod",
        ),
        (
            [(16000, 64000, [1000, 1000], "T4"), (64000, 64000, [1000, 1000], "T4")],
            1,
            "a node left without the CPU its idle GPUs need loses to one that keeps it",
        ),
        (
            [(64000, 64000, [1000, 1000], "T4"), (32000, 64000, [1000, 1000], "T4")],
            1,
            "among nodes that keep enough CPU for their idle GPUs, the tightest (best fit)",
        ),
    ],
    ids=["full-gpu-node-first", "keep-cpu-for-idle-gpus", "best-fit-among-enough"],
)
def test_gputide_places_cpu_only_pods_where_they_strand_fewest_gpus(nodes, expected, why):
    state = cluster(*nodes)
    placement = Scheduler(state, "gputide", MIX).place(PodRequest(8000, 1000))
    assert placement is not None and placement.node == expected, why


@pytest.mark.parametrize(
    ("options", "types", "mem"),
    [({}, 2, [8000, 8000]), ({"key_cpu": True, "memory": False}, 3, [0, 0, 0])],
    ids=["shape-keyed", "fgd-authors-keyed"],
)
def test_workload_mix_keying(options, types, mem):
    pods = [PodRequest(4000, 8000, 1, 500)] * 2 + [
        PodRequest(8000, 8000, 1, 500),
        PodRequest(4000, 8000, 2, 1000),
    ]
    mix = WorkloadMix.from_pods(pods, **options)
    assert len(mix) == types
    assert sorted(mix.mem.tolist()) == mem
    assert abs(mix.weight.sum() - 1) < 1e-9


def test_gpu_pods_keep_the_cpu_their_nodes_idle_gpus_need():
    from balancer.plan.placement.plugins import CpuForIdleGpus

    # MIX asks 4000 CPU per 0.875 GPU (4571 per GPU); after a 1-GPU, 8000-CPU pod a 4-GPU node has 3 idle
    # GPUs that need 13714
    state = cluster((24000, 64000, [1000] * 4, "T4"), (14000, 64000, [1000] * 4, "T4"), (8000, 64000, [1000], "T4"))
    sched = Scheduler(state, "gputide", MIX)
    c = sched.candidates(PodRequest(8000, 1000, 1, 1000))
    score = dict(zip(c.node.tolist(), CpuForIdleGpus().score(c).tolist(), strict=True))
    assert score[0] == 0.0  # keeps 16000 for its 3 idle GPUs
    assert score[1] == pytest.approx((6000 - 3 * 4000 / 0.875) / 14000)  # keeps 6000 of the 13714 they need
    assert score[2] == 0.0  # its only GPU is taken: nothing left idle to strand
    assert CpuForIdleGpus().score(sched.candidates(PodRequest(8000, 1000))).tolist() == [0.0, 0.0, 0.0]


def test_only_wholly_idle_gpus_ask_for_cpu_a_share_next_to_another_takes_none_away():
    from balancer.plan.placement.plugins import CpuForIdleGpus

    state = cluster((20000, 64000, [1000, 1000, 1000, 500], "T4"))  # one GPU already half used
    sched = Scheduler(state, "gputide", MIX)
    c = sched.candidates(PodRequest(8000, 1000, 1, 500))
    score = {int(slot): v for slot, v in zip(c.slot, CpuForIdleGpus().score(c), strict=True)}
    assert score[3] == pytest.approx((12000 - 3 * 4000 / 0.875) / 20000)  # 3 empty GPUs still want CPU
    assert score[0] == 0.0  # opening a fresh GPU leaves 2 empty ones: 9143 of CPU is enough
