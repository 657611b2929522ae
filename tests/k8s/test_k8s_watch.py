"""Watching the API server: the fake's watch semantics, `ListWatch` (list, watch, relist on 410 or failure) and
`KubernetesWorkloads(watch=True)`, all through the official client over real HTTP."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from fakeapi import FakeKube, job, pdb, pod
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from balancer.actuate.k8s_watch import ListCache, ListWatch
from balancer.actuate.k8s_workloads import KubernetesWorkloads, running_workload


def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait for the watch thread to catch up; fails with the check's name after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not reached within {timeout_s} s: {check.__doc__ or check}"
        time.sleep(0.02)


def events(api, **kwargs) -> list[tuple[str, str]]:
    core = k8s.CoreV1Api(api)
    return [(e["type"], e["raw_object"]["metadata"].get("name", ""))
            for e in k8s_watch.Watch().stream(core.list_pod_for_all_namespaces, timeout_seconds=1, **kwargs)]


def test_the_fake_watch_sends_what_changed_after_a_version_as_a_filtered_watch_does(kube: FakeKube, api):
    kube.add(pod("a", gpus=1))
    since = kube.add(pod("b", gpus=1))["metadata"]["resourceVersion"]
    kube.add(pod("c", gpus=1, phase="Pending"))
    kube.mutate("pods", "c", "default", {"status": {"phase": "Running"}})   # starts matching: ADDED
    kube.mutate("pods", "a", "default", {"metadata": {"labels": {"x": "1"}}})
    kube.mutate("pods", "b", "default", {"status": {"phase": "Succeeded"}})  # stops matching: DELETED
    kube.delete("pods", "a", "default")
    assert events(api, resource_version=since, field_selector="status.phase=Running") == [
        ("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b"), ("DELETED", "a")]
    # from "0": what matches now, then the stream ends at its timeout with a bookmark
    assert events(api, resource_version="0", field_selector="status.phase=Running",
                  allow_watch_bookmarks=True) == [("ADDED", "c"), ("BOOKMARK", "")]


def test_a_compacted_history_answers_410_and_a_live_watch_sees_a_later_change(kube: FakeKube, api):
    old = kube.add(pod("a", gpus=1))["metadata"]["resourceVersion"]
    now = kube.add(pod("b", gpus=1))["metadata"]["resourceVersion"]
    kube.compact()
    with pytest.raises(ApiException) as err:
        events(api, resource_version=old)
    assert err.value.status == 410
    # a watch from the current version gets a change made while it waits
    core, seen = k8s.CoreV1Api(api), []
    stream = k8s_watch.Watch().stream(core.list_pod_for_all_namespaces, resource_version=now, timeout_seconds=5)
    kube.add(pod("c", gpus=1))
    for e in stream:
        seen.append((e["type"], e["raw_object"]["metadata"]["name"]))
        break
    assert seen == [("ADDED", "c")]


@pytest.fixture
def pods_watch(kube: FakeKube, api):
    core = k8s.CoreV1Api(api)
    lists: list[dict] = []

    def list_call(**kw):
        lists.append(kw)
        return core.list_pod_for_all_namespaces(_preload_content=False, **kw).json()

    lw = ListWatch("running pods", list_call, core.list_pod_for_all_namespaces, running_workload,
                   selectors={"field_selector": "status.phase=Running"}, watch_s=1.0, backoff_s=0.05)
    lw.list_kwargs = lists
    yield lw
    lw.stop()


def owners(lw: ListWatch) -> dict[str, str]:
    return {k: w.owner for k, w in lw.snapshot()[1].items()}


def test_list_watch_follows_adds_changes_finishes_and_deletes(kube: FakeKube, pods_watch: ListWatch):
    kube.add(pod("chat-1", "serving", gpus=1, owner=("Job", "x")))
    kube.add(pod("web", "serving", gpus=0))                      # no GPU: not a workload
    pods_watch.start()
    eventually(lambda: pods_watch.synced)
    assert owners(pods_watch) == {"serving/chat-1": "x"}
    assert pods_watch.list_kwargs == [{"resource_version": "0", "field_selector": "status.phase=Running"}]
    kube.add(pod("chat-2", "serving", gpus=1, labels={"gputide.io/service": "chat"}))
    eventually(lambda: "serving/chat-2" in owners(pods_watch))
    kube.mutate("pods", "chat-2", "serving", {"metadata": {"labels": {"gputide.io/service": "chat-v2"}}})
    eventually(lambda: owners(pods_watch).get("serving/chat-2") == "chat-v2")
    kube.mutate("pods", "chat-1", "serving", {"status": {"phase": "Succeeded"}})
    eventually(lambda: "serving/chat-1" not in owners(pods_watch))
    kube.delete("pods", "chat-2", "serving")
    eventually(lambda: owners(pods_watch) == {})
    generation = pods_watch.generation
    kube.mutate("pods", "web", "serving", {"metadata": {"labels": {"x": "y"}}})  # not an item: no change
    time.sleep(0.3)
    assert pods_watch.generation == generation
    assert len(pods_watch.list_kwargs) == 1   # several watches (1 s each), one list


def test_list_watch_lists_again_after_410_and_after_a_failed_watch_and_loses_nothing(
        kube: FakeKube, pods_watch: ListWatch):
    kube.add(pod("a", gpus=1))
    pods_watch.start()
    eventually(lambda: pods_watch.synced)
    # the history is compacted and changes happen while no watch is open: 410, list, nothing lost
    kube.before("GET", r"/pods\?.*watch=true", lambda: (kube.add(pod("b", gpus=1)), kube.compact()))
    eventually(lambda: set(owners(pods_watch)) == {"default/a", "default/b"})
    assert pods_watch.lists >= 2
    # the API server fails the next watch (500): back off, list again, pick up what changed meanwhile
    lists = pods_watch.lists
    kube.inject("GET", r"/pods\?.*watch=true", 500, count=1)
    kube.before("GET", r"/pods\?.*watch=true", lambda: kube.delete("pods", "a", "default"))
    eventually(lambda: set(owners(pods_watch)) == {"default/b"} and pods_watch.lists > lists)
    eventually(lambda: pods_watch.failures == 0)


def test_a_list_again_is_not_older_than_what_the_watch_showed_and_consistent_when_that_is_gone(
        kube: FakeKube, pods_watch: ListWatch):
    """A list after a failed watch asks for no older state than the last resourceVersion seen (NotOlderThan); told
    410 Gone, it lists consistently. Before, every list was at "0": a lagging watch cache served an older state."""
    kube.add(pod("a", gpus=1))
    pods_watch.start()
    eventually(lambda: pods_watch.synced)
    seen = kube.add(pod("b", gpus=1))["metadata"]["resourceVersion"]
    eventually(lambda: pods_watch.seen == seen)
    kube.inject("GET", r"/pods\?(?!.*watch=true).*resourceVersionMatch=NotOlderThan", 410, count=1)
    kube.inject("GET", r"/pods\?.*watch=true", 500, count=1)
    eventually(lambda: pods_watch.lists == 2)
    selector = {"field_selector": "status.phase=Running"}
    assert pods_watch.list_kwargs[1:] == [
        {"resource_version": seen, "resource_version_match": "NotOlderThan", **selector}, selector]
    assert set(owners(pods_watch)) == {"default/a", "default/b"}


def test_stop_ends_the_thread_while_a_watch_is_open(kube: FakeKube, api):
    core = k8s.CoreV1Api(api)
    lw = ListWatch("pods", lambda **kw: core.list_pod_for_all_namespaces(_preload_content=False, **kw).json(),
                   core.list_pod_for_all_namespaces, running_workload, watch_s=30.0).start()
    # the stream open and idle: stop() closes it (`_resp`). Not a 0.2 s sleep after the list: a watch thread that
    # opened it later was stopped before, and blocked in the 30 s stream the stop missed (left alone: the product's)
    eventually(lambda: lw.synced and getattr(lw._watch, "_resp", None) is not None)
    started = time.monotonic()
    lw.stop()
    assert not lw._thread.is_alive() and time.monotonic() - started < 5.0


def test_kubernetes_workloads_with_watch_lists_once_and_follows_events_without_a_ttl(kube: FakeKube, api, clock):
    kube.add(pod("chat-1", "serving", gpus=1, owner=("Job", "x")))
    provider = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None, watch=True, watch_s=1.0)
    try:
        def plain_lists():
            return len([r for r in kube.requests if r.path.endswith("/pods") and "watch=true" not in r.query])
        assert set(provider()) == {"serving/chat-1"}   # the first call answers at once (its own list if need be)
        eventually(lambda: provider.watch.synced)
        listed = plain_lists()
        assert listed in (1, 2)                        # the watch's, and the first call's unless the watch was first
        kube.add(pod("chat-2", "serving", gpus=1))
        eventually(lambda: set(provider()) == {"serving/chat-1", "serving/chat-2"})  # the clock never moved
        kube.delete("pods", "chat-1", "serving")
        eventually(lambda: set(provider()) == {"serving/chat-2"})
        assert plain_lists() == listed                 # no list per call once the watch follows
    finally:
        provider.close()


def test_a_refused_watch_degrades_to_a_list_per_backoff_and_nothing_is_lost(kube: FakeKube, api, clock):
    kube.add(pod("chat-1", "serving", gpus=1))
    kube.inject("GET", r"watch=true", 403, count=10_000)   # RBAC granting list but not watch
    provider = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None, watch=True)
    provider.watch.backoff_s = provider.watch.max_backoff_s = 0.05
    try:
        assert set(provider()) == {"serving/chat-1"}
        eventually(lambda: provider.watch.synced and provider.watch.failures > 0)
        kube.add(pod("chat-2", "serving", gpus=1))
        eventually(lambda: set(provider()) == {"serving/chat-1", "serving/chat-2"})  # from a later list
        assert provider.watch.lists >= 2
    finally:
        provider.close()


def test_the_watch_state_reaches_the_controller_metrics(kube: FakeKube, api, clock):
    from prometheus_client import CollectorRegistry

    from balancer.metrics import ControllerMetrics

    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    provider = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None, watch=True, watch_s=1.0)
    provider.watch.backoff_s = provider.watch.max_backoff_s = 0.05
    metrics.follow_watch("pods", lambda: provider.watch.synced, lambda: provider.watch.failures)

    def sample(name):
        return registry.get_sample_value(name, {"resource": "pods"})
    try:
        assert (sample("gputide_kubernetes_watch_synced"), sample("gputide_kubernetes_watch_failures")) == (0, 0)
        provider()
        eventually(lambda: sample("gputide_kubernetes_watch_synced") == 1)
        fault = kube.inject("GET", r"/pods\?", 503, count=10_000)     # the API server goes away
        eventually(lambda: sample("gputide_kubernetes_watch_failures") >= 2)
        fault.remaining = 0                                           # and comes back
        kube.add(pod("late", gpus=1))
        eventually(lambda: sample("gputide_kubernetes_watch_failures") == 0 and "default/late" in provider())
    finally:
        provider.close()


def test_an_unexpected_failure_does_not_end_the_reflector(kube: FakeKube, api):
    """A bug or an answer no one foresaw (here: converting one object raises) is logged and treated as a failed
    watch: back off, list again. The thread never dies leaving a cache that looks synced and stays stale."""
    core = k8s.CoreV1Api(api)
    broken = {"once": True}

    def convert(obj):
        if obj["metadata"]["name"] == "odd" and broken.pop("once", False):
            raise TypeError("unforeseen")
        return running_workload(obj)

    lw = ListWatch("pods", lambda **kw: core.list_pod_for_all_namespaces(_preload_content=False, **kw).json(),
                   core.list_pod_for_all_namespaces, convert, watch_s=1.0, backoff_s=0.05).start()
    try:
        eventually(lambda: lw.synced)
        kube.add(pod("odd", gpus=1))
        eventually(lambda: "default/odd" in lw.snapshot()[1] and lw.lists >= 2)
        eventually(lambda: lw.failures == 0)
        assert lw._thread.is_alive()
    finally:
        lw.stop()


# ---- PodDisruptionBudgets and the Jobs gputide suspended ------------------------------------------------------


@dataclass(frozen=True)
class Watched:
    """One resource `KubernetesWorkloads` follows besides the pods: how to make one, change it, and read it back."""

    plural: str
    namespace: str
    make: Callable[[str, int], dict]       # (name, value) -> the object
    change: Callable[[int], dict]          # value -> a merge patch that sets it
    cache: Callable[[KubernetesWorkloads], ListCache]
    read: Callable[[KubernetesWorkloads], dict[str, int] | None]   # {namespace/name: value}, None when unknown

    def __str__(self) -> str:
        return self.plural


def suspended(name: str, priority: int, *, label: bool = True) -> dict:
    """An elastic Job as gputide suspends it (label `gputide.io/suspended`, its pods' priority recorded)."""
    j = job(name, "ml", parallelism=4, gpus=2, suspend=True)
    j["metadata"]["labels"].update({"gputide.io/suspended": "true"} if label else {})
    j["metadata"]["annotations"] = {"gputide.io/priority": str(priority)}
    j["spec"]["template"]["metadata"] = {"annotations": {"gputide.io/elastic-max": "8"}}
    return j


def _read(items) -> dict[str, int] | None:
    return None if items is None else {f"{o.namespace}/{o.name}": v for o, v in items}


BUDGETS = Watched(
    "poddisruptionbudgets", "serving", lambda name, n: pdb(name, "serving", {"app": name}, n),
    lambda n: {"status": {"disruptionsAllowed": n}}, lambda p: p.budgets,
    lambda p: _read(None if (b := p.disruption_budgets()) is None else [(x, x.disruptions_allowed) for x in b]))
JOBS = Watched(
    "jobs", "ml", suspended, lambda n: {"metadata": {"annotations": {"gputide.io/priority": str(n)}}},
    lambda p: p.jobs,
    lambda p: _read(None if (j := p.suspended_jobs()) is None else [(x, x.priority) for x in j]))
EACH = pytest.mark.parametrize("res", [BUDGETS, JOBS], ids=str)


def plain_lists(kube: FakeKube, plural: str) -> int:
    return len([r for r in kube.requests if r.path.endswith(f"/{plural}") and "watch=true" not in r.query])


@pytest.fixture
def watching(api, clock):
    """`KubernetesWorkloads(watch=True)` with 1 s watches and a 50 ms backoff, closed after the test."""
    provider = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None, watch=True, watch_s=1.0)
    for cache in (provider.pods, provider.jobs, provider.budgets):
        cache.watch.backoff_s = cache.watch.max_backoff_s = 0.05
    yield provider
    provider.close()


@EACH
def test_a_watched_object_created_changed_or_deleted_is_seen_at_once_and_no_cycle_lists_again(
        kube: FakeKube, watching: KubernetesWorkloads, res: Watched):
    kube.add(res.make("web", 1))
    assert res.read(watching) == {f"{res.namespace}/web": 1}   # the first call answers at once (its own list)
    eventually(lambda: res.cache(watching).watch.synced)
    listed = plain_lists(kube, res.plural)
    assert listed in (1, 2)                        # the watch's, and the first call's unless the watch was first
    kube.add(res.make("chat", 2))
    eventually(lambda: res.read(watching) == {f"{res.namespace}/chat": 2, f"{res.namespace}/web": 1})  # no TTL
    kube.mutate(res.plural, "web", res.namespace, res.change(0))
    eventually(lambda: res.read(watching)[f"{res.namespace}/web"] == 0)
    kube.delete(res.plural, "chat", res.namespace)
    eventually(lambda: res.read(watching) == {f"{res.namespace}/web": 0})
    first = res.cache(watching).current()
    time.sleep(1.5)                                # the 1 s watch ends and is reopened from where it was
    for _ in range(100):                           # a hundred planning cycles
        assert res.cache(watching).current() is first   # nothing changed: the same answer, not a new one
    assert plain_lists(kube, res.plural) == listed and res.cache(watching).watch.lists == 1


@EACH
def test_a_watched_resource_is_unknown_until_the_api_has_answered(kube: FakeKube, watching: KubernetesWorkloads,
                                                                  res: Watched):
    kube.add(res.make("web", 1))
    down = kube.inject("GET", rf"/{res.plural}(\?|$)", 503, count=10_000)
    assert res.read(watching) is None              # unknown, not "none there"
    eventually(lambda: res.cache(watching).watch.failures >= 2)
    assert res.read(watching) is None
    down.remaining = 0
    eventually(lambda: res.read(watching) == {f"{res.namespace}/web": 1})


@EACH
def test_a_refused_watch_still_answers_from_a_list_per_backoff(kube: FakeKube, watching: KubernetesWorkloads,
                                                               res: Watched):
    kube.add(res.make("web", 1))
    kube.inject("GET", rf"/{res.plural}\?.*watch=true", 403, count=10_000)   # RBAC granting list, not watch
    assert res.read(watching) == {f"{res.namespace}/web": 1}
    eventually(lambda: res.cache(watching).watch.synced and res.cache(watching).watch.failures > 0)
    kube.mutate(res.plural, "web", res.namespace, res.change(0))
    eventually(lambda: res.read(watching) == {f"{res.namespace}/web": 0})   # from a later list
    assert res.cache(watching).watch.lists >= 2


@EACH
def test_a_watch_that_expires_lists_again_and_misses_no_change(kube: FakeKube, watching: KubernetesWorkloads,
                                                               res: Watched):
    kube.add(res.make("web", 1))
    res.read(watching)
    eventually(lambda: res.cache(watching).watch.synced)
    # while no watch is open the object changes and the history is compacted: 410 Gone, list, nothing lost
    kube.before("GET", rf"/{res.plural}\?.*watch=true", lambda: (
        kube.mutate(res.plural, "web", res.namespace, res.change(0)), kube.compact()))
    eventually(lambda: res.read(watching) == {f"{res.namespace}/web": 0} and res.cache(watching).watch.lists >= 2)
    eventually(lambda: res.cache(watching).watch.failures == 0)


def test_a_job_counts_as_suspended_from_the_event_that_labels_it_to_the_one_that_resumes_it(
        kube: FakeKube, watching: KubernetesWorkloads):
    kube.add(pod("train-0", "research", gpus=1, owner=("Job", "train")))
    kube.add(suspended("train", 50, label=False))   # suspended by a person: not gputide's to resume
    assert watching.suspended_jobs() == () and watching()["research/train-0"].owner == "train"
    eventually(lambda: watching.jobs.watch.synced and watching.watch.synced)
    kube.mutate("jobs", "train", "ml", {"metadata": {"labels": {"gputide.io/suspended": "true"}}})  # gputide's
    # the suspended ml/train and the running research/train now clash: both are qualified, with no TTL waited
    eventually(lambda: [j.name for j in watching.suspended_jobs()] == ["ml/train"])
    assert watching()["research/train-0"].owner == "research/train"
    kube.mutate("jobs", "train", "ml", {"metadata": {"labels": {"gputide.io/suspended": None}},
                                        "spec": {"suspend": False, "parallelism": 2}})  # as the actuator resumes
    eventually(lambda: watching.suspended_jobs() == ())
    assert watching()["research/train-0"].owner == "train"


def test_an_hour_of_a_30_s_controller_lists_each_resource_at_most_twice(kube: FakeKube, api, clock):
    """The figure docs/readme/kubernetes.md quotes: 120 cycles of what a snapshot asks (pods, nodes, suspended Jobs,
    budgets) at the TTL `gputide run` sets, max(interval, 30 s). Before budgets and Jobs were watched this was 244
    lists, 120 of each of them; now each resource is listed by the watch and at most once by the first cycle."""
    from balancer.actuate.k8s_nodes import KubernetesNodes

    kube.add(pod("p", gpus=1))
    kube.add(pdb("web", "default", {"app": "web"}, 1))
    kube.add(suspended("train", 1))
    workloads = KubernetesWorkloads(api, ttl_s=30.0, clock=clock, sleep=lambda s: None, watch=True)
    nodes = KubernetesNodes(api, ttl_s=30.0, clock=clock, watch=True)
    try:
        for cycle in range(120):
            workloads(), nodes(), workloads.suspended_jobs(), workloads.disruption_budgets()
            clock.advance(30)
            if cycle == 0:   # a real cycle is 30 s: the watches have long synced by the next one
                eventually(lambda: all(c.watch.synced for c in (workloads.pods, workloads.jobs, workloads.budgets,
                                                                  workloads.jobs_facts, nodes.nodes)))
        lists = {plural: plain_lists(kube, plural) for plural in ("pods", "nodes", "poddisruptionbudgets")}
        jobs = [r for r in kube.requests if r.path.endswith("/jobs") and "watch=true" not in r.query]
        lists["suspended jobs"] = len([r for r in jobs if "labelSelector" in r.query])
        lists["jobs"] = len(jobs) - lists["suspended jobs"]   # every Job: worker limits, Kueue restarts
        assert all(1 <= n <= 2 for n in lists.values()), lists
    finally:
        workloads.close()
        nodes.close()
