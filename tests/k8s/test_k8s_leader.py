"""LeaseLeaderElector against the fake API server: one leader, takeover after expiry, release, races."""

from __future__ import annotations

import pytest
from fakeapi import MICRO_TIME, FakeKube
from kubernetes import client as k8s

from balancer.actuate.k8s_leader import LeaseLeaderElector
from balancer.actuate.kubernetes import parse_time


def elector(api: k8s.ApiClient, clock, identity: str) -> LeaseLeaderElector:
    return LeaseLeaderElector(api, "gputide-controller", "gputide", identity, lease_duration_s=15,
                              renew_deadline_s=10, clock=clock)


def lease(kube: FakeKube) -> dict:
    return kube.get("leases", "gputide-controller", "gputide")["spec"]


@pytest.fixture
def pair(api, clock) -> tuple[LeaseLeaderElector, LeaseLeaderElector]:
    return elector(api, clock, "replica-a"), elector(api, clock, "replica-b")


def test_the_first_replica_creates_the_lease_and_leads(kube: FakeKube, pair, clock) -> None:
    a, b = pair
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    assert (a.is_leader, b.is_leader) == (True, False)
    spec = lease(kube)
    assert spec["holderIdentity"] == "replica-a" and spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert MICRO_TIME.match(spec["renewTime"]) and MICRO_TIME.match(spec["acquireTime"])
    assert parse_time(spec["renewTime"]) == pytest.approx(clock.now, abs=1e-5)


@pytest.mark.parametrize(
    ("steps", "leaders"),
    [
        pytest.param("ab" * 6, "a" * 12, id="a renewing leader keeps the lease"),
        pytest.param("ba" * 6, "b" * 12, id="whoever comes first keeps it"),
    ],
)
def test_exactly_one_leader_at_every_step(pair, clock, steps, leaders) -> None:
    a, b = pair
    by_name = {"a": a, "b": b}
    seen = ""
    for step in steps:
        by_name[step].try_acquire_or_renew()
        assert a.is_leader != b.is_leader
        seen += "a" if a.is_leader else "b"
        clock.advance(2.5)
    assert seen == leaders


def test_renewal_keeps_acquire_time_and_transitions(kube: FakeKube, pair, clock) -> None:
    a, _ = pair
    a.try_acquire_or_renew()
    first = lease(kube)
    clock.advance(5)
    assert a.try_acquire_or_renew() is True
    second = lease(kube)
    assert second["acquireTime"] == first["acquireTime"]
    assert second["leaseTransitions"] == 0
    assert parse_time(second["renewTime"]) - parse_time(first["renewTime"]) == pytest.approx(5, abs=1e-5)


def test_the_other_replica_takes_over_only_after_the_lease_expires(kube: FakeKube, pair, clock) -> None:
    a, b = pair
    a.try_acquire_or_renew()
    assert b.try_acquire_or_renew() is False          # b observes a's record now
    clock.advance(10)
    assert a.is_leader is False                        # a stopped renewing: past its renew deadline
    assert b.try_acquire_or_renew() is False           # but a's lease is still valid for b
    clock.advance(5.5)
    assert b.try_acquire_or_renew() is True
    spec = lease(kube)
    assert spec["holderIdentity"] == "replica-b" and spec["leaseTransitions"] == 1
    assert parse_time(spec["acquireTime"]) == pytest.approx(clock.now, abs=1e-5)
    assert a.try_acquire_or_renew() is False and a.is_leader is False


def test_release_hands_over_at_once(kube: FakeKube, pair, clock) -> None:
    a, b = pair
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    assert a.release() is True
    assert a.is_leader is False and lease(kube)["holderIdentity"] == ""
    clock.advance(0.1)
    assert b.try_acquire_or_renew() is True
    assert lease(kube)["holderIdentity"] == "replica-b" and lease(kube)["leaseTransitions"] == 1
    assert a.release() is False


def test_of_two_replicas_racing_for_an_expired_lease_only_one_wins(kube: FakeKube, pair, clock) -> None:
    a, b = pair
    old = elector(a.api.coordination.api_client, clock, "replica-old")
    old.try_acquire_or_renew()
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    clock.advance(16)
    # b reads the expired lease; before b's write lands, a reads and writes: b's write carries a stale version
    kube.before("PUT", r"/leases/gputide-controller$", a.try_acquire_or_renew)
    assert b.try_acquire_or_renew() is False
    assert a.is_leader is True and b.is_leader is False
    # b's write, a's read and write within it, b's read again after its 409: the holder changed, no second write
    assert [r.method for r in kube.requests[-4:]] == ["PUT", "GET", "PUT", "GET"]
    assert lease(kube)["holderIdentity"] == "replica-a"


def test_of_two_replicas_creating_the_lease_only_one_wins(kube: FakeKube, pair) -> None:
    a, b = pair
    kube.before("POST", r"/leases$", a.try_acquire_or_renew)
    assert b.try_acquire_or_renew() is False
    assert a.is_leader is True and lease(kube)["holderIdentity"] == "replica-a"


def test_api_errors_keep_leadership_until_the_renew_deadline(kube: FakeKube, pair, clock) -> None:
    a, b = pair
    a.try_acquire_or_renew()
    kube.inject(None, r"/leases/", 500, count=10)
    clock.advance(5)
    assert a.try_acquire_or_renew() is True            # within the deadline, still leader
    clock.advance(5)
    assert a.try_acquire_or_renew() is False           # deadline passed without a renewal
    assert b.is_leader is False


def test_renew_deadline_must_be_shorter_than_the_lease(api, clock) -> None:
    with pytest.raises(ValueError, match="renew_deadline_s"):
        LeaseLeaderElector(api, "x", "y", "z", lease_duration_s=10, renew_deadline_s=10, clock=clock)


def test_the_lease_elector_is_the_loops_leader_elector(pair, clock) -> None:
    a, b = pair
    assert a.try_acquire(0.0) is True
    assert b.try_acquire(1e12) is False, "the loop's clock must not expire someone else's lease"
    a.release()
    assert b.try_acquire(0.0) is True and not a.is_leader


def test_two_reconcilers_on_one_lease_only_the_leader_plans(kube: FakeKube, pair, clock) -> None:
    from balancer.actuate.dryrun import DryRunActuator
    from balancer.loop import Reconciler
    from balancer.metrics import ControllerMetrics
    from balancer.model import Plan
    from tests.loop.loop_helpers import make_fleet, snapshot

    planned: list[str] = []

    def planner_for(name):
        def plan(snap, forecasts, policy, state):
            planned.append(name)
            return Plan(actions=()), state
        return plan

    snap = snapshot(make_fleet(1, 2), age=0.0)

    class Source:
        def snapshot(self):
            return snap

    loops = {name: Reconciler(source=Source(), actuator=DryRunActuator(), elector=e, clock=lambda: snap.time,
                              metrics=ControllerMetrics(), planner=planner_for(name))
             for name, e in zip("ab", pair, strict=True)}
    statuses = []
    for _ in range(3):
        statuses.append((loops["a"].run_once().status, loops["b"].run_once().status))
        clock.advance(5)
    assert statuses == [("ok", "standby")] * 3 and planned == ["a"] * 3
    loops["a"].elector.release()
    assert loops["b"].run_once().status == "ok" and planned[-1] == "b"


@pytest.mark.parametrize(("env", "file_text", "expected"), [
    ({"POD_NAMESPACE": "team-a"}, "from-file", "team-a"),
    ({"POD_NAMESPACE": "  "}, "from-file\n", "from-file"),
    ({}, "from-file\n", "from-file"),
    ({}, None, "gputide"),
    ({}, "", "gputide"),
], ids=["downward API env", "blank env falls through", "service account file", "nothing: gputide",
        "empty file: gputide"])
def test_the_lease_namespace_defaults_to_the_pods_own(tmp_path, env, file_text, expected) -> None:
    from balancer.cmd.run import own_namespace

    path = tmp_path / "namespace"
    if file_text is not None:
        path.write_text(file_text)
    assert own_namespace(env, str(path)) == expected


@pytest.mark.parametrize(("argv", "env", "namespace", "lease"), [
    ([], {"POD_NAMESPACE": "team-a"}, "team-a", "gputide-controller"),
    (["--lease-namespace", "elsewhere"], {"POD_NAMESPACE": "team-a"}, "elsewhere", "gputide-controller"),
    (["--shard", "east", "--selector", "pool=H100-SXM"], {"POD_NAMESPACE": "team-a"}, "team-a",
     "gputide-controller-east"),
], ids=["own namespace", "explicit flag wins", "a shard elects on its own Lease"])
def test_gputide_run_uses_the_lease_elector_directly(api, monkeypatch, argv, env, namespace, lease) -> None:
    import argparse

    from balancer.actuate import kubernetes as kube_mod
    from balancer.cmd import run as run_cmd
    from balancer.metrics import ControllerMetrics

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(kube_mod, "build_api_client", lambda kubeconfig=None: api)
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["run", "--prometheus", "http://127.0.0.1:9", "--dry-run", "--leader-elect", *argv])
    metrics = ControllerMetrics()
    rec = run_cmd.build_reconciler(args, metrics)
    assert isinstance(rec.elector, LeaseLeaderElector)
    for resource in ("pods", "nodes", "jobs", "poddisruptionbudgets", "namespaces"):   # every watch it follows
        assert metrics.registry.get_sample_value("gputide_kubernetes_watch_synced", {"resource": resource}) == 0
    assert rec.elector.namespace == namespace
    # gputide_leader names the Lease, so GputideControllerNoLeader tells shards of one job apart
    assert rec.elector.name == lease
    assert metrics.registry.get_sample_value("gputide_leader", {"lease": lease}) == 0
    assert metrics.registry.get_sample_value("gputide_leader", {"lease": ""}) is None
    # with an API client at hand, pod owners, priorities and elastic bounds come from the API
    from balancer.actuate.k8s_workloads import KubernetesWorkloads

    source = getattr(rec.source, "inner", rec.source)
    assert isinstance(source.workload_overrides, KubernetesWorkloads)
    assert source.workload_overrides.watch is not None  # a running controller follows the pods' watch
    assert source.suspended_jobs == source.workload_overrides.suspended_jobs  # so jobs may be suspended


def test_the_safety_ledger_rides_on_the_lease_to_the_next_holder(kube: FakeKube, pair, clock) -> None:
    from balancer.actuate.k8s_leader import LEDGER_ANNOTATION

    a, b = pair
    a.try_acquire_or_renew()
    a.save_state('{"evictions":[1.0]}')
    metadata = kube.get("leases", "gputide-controller", "gputide")["metadata"]
    assert metadata["annotations"][LEDGER_ANNOTATION] == '{"evictions":[1.0]}'
    a.try_acquire_or_renew()                            # renewing keeps it
    assert kube.get("leases", "gputide-controller", "gputide")["metadata"]["annotations"][LEDGER_ANNOTATION]
    assert a.load_state() is None                       # a created the Lease: nothing to inherit
    assert a.release() is True                          # a release keeps it for the successor
    clock.advance(0.1)
    assert b.try_acquire_or_renew() is True
    assert b.load_state() == '{"evictions":[1.0]}' and b.load_state() is None  # handed over once


def test_a_new_leader_inherits_cooldowns_and_spent_evictions_and_refuses_what_they_forbid(kube: FakeKube, pair,
                                                                                         clock) -> None:
    """Replica a shrinks a job and dies; replica b takes over after the lease expires and, though it never saw
    the shrink, refuses to touch the job again within the cooldown and counts the eviction against its budget."""
    from prometheus_client import CollectorRegistry

    from balancer.actuate.dryrun import DryRunActuator
    from balancer.config import BalancerPolicy, SafetyPolicy
    from balancer.loop import Reconciler
    from balancer.metrics import ControllerMetrics
    from balancer.model import Plan, ScaleTraining, WorkloadClass
    from tests.loop.loop_helpers import make_fleet, snapshot, workload

    snap = snapshot(make_fleet(1, 4), workloads=[(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job",
                                                           elastic_min=0), (i,)) for i in range(2)], age=0.0)
    shrink = ScaleTraining(job="job", workers=1, previous_workers=2, reason="room", expected_gain=5.0)

    class Source:
        def snapshot(self):
            return snap

    def planner(s, forecasts, policy, state):
        return Plan(actions=(shrink,)), state

    class Applying(DryRunActuator):
        def apply(self, action, snapshot):
            from balancer.actuate.base import ActionResult, Outcome
            return ActionResult(action, Outcome.APPLIED)

    policy = BalancerPolicy(safety=SafetyPolicy(cooldown_s=600.0, eviction_budget=5))
    registries = {n: CollectorRegistry() for n in "ab"}
    loops = {n: Reconciler(source=Source(), actuator=Applying(), elector=e, clock=lambda: clock.now, policy=policy,
                           metrics=ControllerMetrics(registries[n]), planner=planner)
             for n, e in zip("ab", pair, strict=True)}
    first = loops["a"].run_once()
    assert [r.action for r in first.results] == [shrink]
    assert loops["b"].run_once().status == "standby"     # b sees a's lease ...
    clock.advance(16)                                   # ... then a is gone: no renewals, the lease expires
    second = loops["b"].run_once()
    assert second.status == "ok" and second.results == []
    assert [why for _, why in second.rejected] == ["cooldown"]
    assert registries["b"].get_sample_value("gputide_eviction_budget_remaining") == 4


def _services_file(tmp_path):
    import yaml

    path = tmp_path / "services.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "gputide/v1alpha1", "kind": "ServiceProfiles",
                                    "services": [{"name": "chat", "rpsPerReplica": 10}]}))
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"apiVersion": "gputide/v1alpha1", "kind": "BalancerPolicy",
                                      "metadata": {"name": "t"}, "spec": {"capacity": {"enabled": True}}}))
    return ["--services", str(path), "--policy", str(policy)]


def test_a_dry_run_of_capacity_shifting_reads_pod_owners_from_the_api_when_it_can(api, monkeypatch, tmp_path):
    import argparse

    from balancer.actuate import kubernetes as kube_mod
    from balancer.actuate.k8s_workloads import KubernetesWorkloads
    from balancer.cmd import run as run_cmd
    from balancer.errors import PermanentActuationError
    from balancer.metrics import ControllerMetrics

    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["run", "--prometheus", "http://127.0.0.1:9", "--dry-run", *_services_file(tmp_path)])
    monkeypatch.setattr(kube_mod, "build_api_client", lambda kubeconfig=None: api)
    rec = run_cmd.build_reconciler(args, ControllerMetrics())
    assert isinstance(rec.source.workload_overrides, KubernetesWorkloads)  # read-only: the actuator stays dry
    assert type(rec.actuator).__name__ == "DryRunActuator"

    def no_config(kubeconfig=None):
        raise PermanentActuationError("no Kubernetes API configuration: none found")

    monkeypatch.setattr(kube_mod, "build_api_client", no_config)
    blind = run_cmd.build_reconciler(args, ControllerMetrics())  # no cluster at hand: a warning, not a failure
    assert blind.source.workload_overrides is None


def test_gputide_run_without_a_kubernetes_configuration_exits_2_naming_kubeconfig(monkeypatch, tmp_path, capsys):
    from balancer.cli import main

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["run", "--prometheus", "http://127.0.0.1:9", "--once", "--metrics-port", "0"]) == 2
    assert "--kubeconfig" in capsys.readouterr().err
