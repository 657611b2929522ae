"""The secondary scheduler filters all nodes of a pass at once and keeps one placement snapshot per pass: the nodes
each pod is offered, the reasons it is told and the nodes it is bound to are what the per-node filter and a
placement state rebuilt for every pod give, including after bindings, a binding refused with 409 and a failed one."""

from __future__ import annotations

import copy

from fakeapi import FakeKube, node, pod
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.actuate.k8s_filters import Offers, why_not
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.app.scheduling import EnginePlacer
from balancer.noderules import NO_AFFINITY, NodeRules, PodAffinity, Taint
from tests.fuzz.fuzzing import examples

UNSUPPORTED = PodAffinity(unsupported="required pod affinity or anti-affinity with a namespaceSelector")
TAINTS = [Taint("hot", "true", "NoSchedule"), Taint("gpu", "", "NoExecute"), Taint("soft", "", "PreferNoSchedule")]


@st.composite
def views(draw):
    """Node views as `SecondaryScheduler.nodes_view` makes them, with reservations, taints, labels and the rest."""
    out = []
    for k in range(draw(st.integers(0, 6))):
        keys = draw(st.lists(st.sampled_from(["ml/a", "ml/job", "ml/b"]), unique=True, max_size=2))
        out.append({
            "name": f"n{k}", "labels": {"pool": draw(st.sampled_from(["a", "b"]))}, "gpu_model": "H100",
            "taints": draw(st.lists(st.sampled_from(TAINTS), max_size=2)), "unschedulable": draw(st.booleans()),
            "gpus_total": 8, "gpus_free": draw(st.integers(-1, 8)),
            "cpu_milli_total": 64000, "cpu_milli_free": draw(st.sampled_from([0, 2000, 64000])),
            "memory_mib_total": 262144, "memory_mib_free": draw(st.sampled_from([0, 8192, 262144])),
            "extended_total": {}, "extended_free": draw(st.dictionaries(
                st.sampled_from(["pods", "nvidia.com/mig-1g.10gb"]), st.sampled_from([0.0, 1.0, 3.0]))),
            "reservations": {key: {"count": draw(st.integers(0, 3)),
                                   "cpu_milli": draw(st.sampled_from([0, 2000, 60000])),
                                   "memory_mib": draw(st.sampled_from([0, 8192]))} for key in keys},
        })  # fmt: skip
    return out


requests = st.fixed_dictionaries({
    "name": st.just("ml/a"), "num_gpu": st.integers(0, 4), "cpu_milli": st.sampled_from([0, 2000, 8000]),
    "memory_mib": st.sampled_from([0, 8192]), "pod_affinity": st.sampled_from([NO_AFFINITY, UNSUPPORTED]),
    "rules": st.builds(lambda tolerations, selector: NodeRules.from_pod_spec(
        {"tolerations": tolerations, "nodeSelector": selector}),
        st.sampled_from([[], [{"key": "hot", "operator": "Exists"}], [{"operator": "Exists"}]]),
        st.sampled_from([{}, {"pool": "a"}])),
    "owned": st.sampled_from([frozenset(), frozenset({"ml/a", "ml/job"})]),
    "extended": st.sampled_from([{"pods": 1.0}, {"nvidia.com/mig-1g.10gb": 2.0, "pods": 1.0}]),
})  # fmt: skip


def per_node(view, req) -> list[str | None]:
    """The scheduler's filter node by node, as every pod of a pass used to run it."""
    return [why_not(n, req) for n in view]


@settings(max_examples=examples(200), deadline=None)
@given(view=views(), pods=st.lists(st.tuples(requests, st.integers(0, 5)), min_size=1, max_size=6))
def test_the_pass_filter_answers_what_the_per_node_filter_answers(view, pods):
    offers = Offers(view)
    # what `place` is told a node it is offered has: its free GPUs less every reservation (a pod that owns one on
    # a node it fits is bound there without asking `place`)
    assert [n["gpus_usable"] for n in view] == [n["gpus_free"] - sum(r["count"] for r in n["reservations"].values())
                                                for n in view]
    for req, taken in pods:
        why = per_node(view, req)
        assert offers.fitting(req).tolist() == [i for i, w in enumerate(why) if w is None]
        assert offers.reasons() == why
        own = next((n for n, w in zip(view, why, strict=True) if w is None and set(n["reservations"]) & req["owned"]),
                   None)
        assert offers.reserved_for(req) is own
        if view:   # a binding takes from one node (and its reservation, as the scheduler does): read it again
            n = view[taken % len(view)]
            n["gpus_free"] -= req["num_gpu"]
            n["cpu_milli_free"] -= req["cpu_milli"]
            for k, v in req["extended"].items():
                if k in n["extended_free"]:
                    n["extended_free"][k] -= v
            n["reservations"].pop(next(iter(n["reservations"]), None), None)
            offers.update(taken % len(view))


def plain(placer):
    """The same placer without its pass: a state built afresh for every pod."""
    return lambda request, nodes: placer(request, [dict(n) for n in nodes])


def a_cluster(kube: FakeKube) -> None:
    kube.add(node("h100-a", 8, model="NVIDIA-H100-80GB-HBM3"))
    kube.add(node("h100-b", 8, model="NVIDIA-H100-80GB-HBM3"))
    kube.add(node("l40s", 4, model="NVIDIA-L40S", cpu="32"))
    kube.add(pod("resident", gpus=3, node_name="h100-b"))
    for k, gpus in enumerate([1, 2, 1, 4, 9, 1, 2, 8, 1, 1]):   # 9 GPUs fit nowhere
        kube.add(pod(f"p{k}", gpus=gpus, scheduler="gputide", phase="Pending"))


def test_a_pass_binds_what_a_rebuild_per_pod_binds_through_409s_and_failures(clock) -> None:
    runs = []
    for session in (True, False):
        with FakeKube() as kube:
            a_cluster(kube)
            kube.inject("POST", r"/p2/binding$", 409)   # another replica bound it: left out, nothing committed
            kube.inject("POST", r"/p5/binding$", 403)   # refused: stays pending, nothing committed
            placer = EnginePlacer("gputide")
            client = kube.client()
            sched = SecondaryScheduler(client, "gputide", placer if session else plain(placer), clock=clock,
                                       max_retries=0)
            results = sched.schedule_once()
            bound = {f"p{k}": kube.get("pods", f"p{k}", "default")["spec"].get("nodeName") for k in range(10)}
            runs.append((results, copy.deepcopy(sched.reasons), bound))
            client.close()
    assert runs[0] == runs[1]
    results, reasons, bound = runs[0]
    assert "default/p2" not in results and results["default/p5"] is None and results["default/p4"] is None
    assert sum(node is not None for node in results.values()) >= 6
    assert reasons["default/p4"].startswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu")
