"""However slow the API server, a scheduling pass keeps moving: its reads end within `reads_s`, each pod's turn
within `turn_s`, and `progress` marks each so `gputide schedule`'s liveness probe never takes a long pass of slow
pods for a stuck scheduler, while one stuck in a call still fails it. Time is a fake monotonic clock (`slow_api`)."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest
from fakeapi import FakeKube, node, pod
from slow_api import Clock, SlowServer

from balancer.actuate.k8s_gang import GROUP_LABEL
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import DeadlineExceeded, KubeTemporaryError
from balancer.app.health import Health, call_budget_s, stall_limit


def most_free(request: dict, nodes: list[dict]) -> str | None:
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


def scheduler(api, clock, mono: Clock, moves: list) -> SecondaryScheduler:
    return SecondaryScheduler(api, "gputide", most_free, clock=clock, max_retries=10, sleep=mono.advance,
                              deadline_clock=mono, progress=lambda what: moves.append((what, mono.now)))


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    kube.add(node("n1", 8))
    for name in "abc":
        kube.add(pod(name, gpus=1, scheduler="gputide", phase="Pending"))
    return kube


def test_a_pod_whose_binding_never_answers_has_one_turn_and_the_pods_after_it_are_bound(cluster, api, clock):
    """Every call 5 s; pod a's Binding never answers (10 retries allowed: over four minutes of tries). Its turn
    stops at 40 s (the last third of 60 s kept for what follows a change), a waits for the next pass, and b and c are
    bound in turns of their own; each turn began with a heartbeat."""
    mono, moves = Clock(), []
    sched = scheduler(api, clock, mono, moves)
    cluster.inject("POST", r"/pods/a/binding$", 500, count=100)
    SlowServer(cluster, sched.api, mono, 5.0, {("POST", r"/pods/a/binding$"): 60.0})
    assert sched.schedule_once() == {"default/a": None, "default/b": "n1", "default/c": "n1"}
    assert [what for what, _ in moves] == ["a pass's reads", "pod default/a", "pod default/b", "pod default/c"]
    began = dict(moves)
    assert began["pod default/b"] - began["pod default/a"] == pytest.approx(40.0)
    assert mono.now - began["pod default/c"] == 15.0   # its node read again, its Binding, its Scheduled Event
    assert len(cluster.calls("POST", r"/pods/a/binding$")) == 4   # at 0, 10.5, 21.5 and 33.5 s (that one cut to 6.5 s)


def test_a_pass_whose_reads_never_answer_fails_within_its_reads_deadline(cluster, api, clock):
    """Listing nodes never answers (10 retries allowed: over ten minutes); the pass fails after 120 s and the next
    one lists again, as after any failed read."""
    mono, moves = Clock(), []
    sched = scheduler(api, clock, mono, moves)
    cluster.inject("GET", r"/api/v1/nodes$", 500, count=100)
    SlowServer(cluster, sched.api, mono, 5.0, {("GET", r"/api/v1/nodes$"): 60.0})
    with pytest.raises(DeadlineExceeded, match="list nodes: .*not retried"):
        sched.schedule_once()
    assert mono.now <= sched.reads_s == 120.0
    assert not cluster.calls("POST", r"/binding$")


def test_the_turn_budget_is_the_longer_of_the_two_deadlines(api):
    assert SecondaryScheduler(api, "gputide", most_free).turn_budget_s == 120.0
    assert SecondaryScheduler(api, "gputide", most_free, turn_s=200.0).turn_budget_s == 200.0


def test_gputide_schedule_probes_a_long_pass_of_slow_pods_as_moving(kube: FakeKube, api, clock, monkeypatch):
    """Ten pods whose Bindings never answer: a pass of 430 s, longer than the 300 s liveness limit a heartbeat per
    pass gave, so the kubelet would have restarted a healthy scheduler in the middle of it. `gputide schedule`
    marks each pod's turn; the probe says live at the pass's end, and the limit it is given is the deadlines'."""
    from balancer.cmd import schedule as schedule_cmd

    kube.add(node("n1", 16))
    for i in range(10):
        kube.add(pod(f"p{i}", gpus=1, scheduler="gputide", phase="Pending"))
    kube.inject("POST", r"/binding$", 500, count=1000)
    mono = Clock()
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, max_retries=10, sleep=mono.advance,
                               deadline_clock=mono)
    SlowServer(kube, sched.api, mono, 5.0, {("POST", r"/binding$"): 60.0})
    probes, limits = [], []

    def health(stall_after_s: float) -> Health:
        limits.append(stall_after_s)
        probes.append(Health(stall_after_s, clock=mono))
        return probes[-1]

    def one_pass(scheduler, metrics) -> None:   # the pass, then what the probe says before the loop's heartbeat
        scheduler.schedule_once()
        probes.append(probes[0].live())
        scheduler.stop()   # what SIGTERM does

    monkeypatch.setattr(schedule_cmd, "Health", health)
    monkeypatch.setattr(schedule_cmd, "one_pass", one_pass)
    args = argparse.Namespace(metrics_port=0, scheduler_name="gputide", policy="gputide")
    assert schedule_cmd.serve(args, sched, SimpleNamespace(facts_nodes=0), lambda: True, 2.0) == 0
    assert limits == [stall_limit(2.0, 120.0)] == [300.0]
    assert mono.now > 400.0
    assert probes[1] == (True, "ok: pod default/p9 began 40 s ago")


# ---- after a stop: what `gputide schedule`'s grace period rests on (balancer/cmd/schedule.py stop_budget_s) ----


def test_a_stop_during_a_slow_read_ends_the_pass_with_that_one_call(cluster, api, clock):
    """Every call 5 s, listing nodes fails three times and the stop comes during its first try: that try is the
    last (its retries ran their course, up to one call's budget, 43.5 s with 10 s timeouts; once stopped the gateway
    begins none), and the pass fails with the read's error, as out of retries: no bound pods listed, no pod's turn
    begun."""
    mono, moves = Clock(), []
    sched = scheduler(api, clock, mono, moves)
    sched.api.max_retries = 3   # as deployed
    cluster.inject("GET", r"/api/v1/nodes$", 500, count=3)
    SlowServer(cluster, sched.api, mono, 5.0)
    cluster.before("GET", r"/api/v1/nodes$", sched.stop)

    with pytest.raises(KubeTemporaryError, match="^list nodes: HTTP 500"):
        sched.schedule_once()

    assert mono.now - 5.0 == 5.0 < call_budget_s(sched.api) == 43.5   # after the pending pods: one try, no backoff
    assert len(cluster.calls("GET", r"^/api/v1/nodes$")) == 1
    assert len(cluster.calls("GET", r"^/api/v1/pods$")) == 1, "the pending pods only: no bound pods listed"
    assert [what for what, _ in moves] == ["a pass's reads"]


def test_a_stop_mid_group_on_a_slow_api_server_tells_the_members_left_within_tell_s(kube: FakeKube, api, clock):
    """Eight members, every call 5 s, the stop at the first binding: that binding and its Event end the member's
    turn, then the seven members left unbound are told within `tell_s` (10 s: two Events here, the rest are not
    tried), so a turn and its Events are what the grace period must cover."""
    kube.add(node("n1", 8))
    for i in range(8):
        kube.add(pod(f"w{i}", gpus=1, scheduler="gputide", phase="Pending", labels={GROUP_LABEL: "job"}))
    mono, moves = Clock(), []
    sched = scheduler(api, clock, mono, moves)
    SlowServer(kube, sched.api, mono, 5.0)
    kube.before("POST", r"/binding$", sched.stop)

    assert list(sched.schedule_once().values()) == ["n1"]

    # its node read again (`k8s_sched_nodes`), a binding and its Event
    assert moves[-1] == ("telling 7 pods the pass stopped", moves[-2][1] + 15.0)
    assert mono.now - moves[-1][1] == sched.tell_s == 10.0
    reasons = [r.body["reason"] for r in kube.calls("POST", r"/events$")]
    assert reasons == ["Scheduled", "SchedulingDeferred", "SchedulingDeferred"]
