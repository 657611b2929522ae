"""`gputide power-cap-agent`'s probes: a hung agent (an NVML call that never returns) kept its pod Running, its
metrics thread kept answering Prometheus (so `up` stayed 1 and no alert fired) and the node's power caps never
changed again. /healthz now fails once no sync has ended for the stall limit, /readyz until the first sync has
ended; /metrics is still the agent's exposition. Over real HTTP, the stuck sync a real thread blocked in a call."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry

from balancer.actuate.k8s_nodes import NodeAnnotationCaps
from balancer.app.health import Health, call_budget_s
from balancer.cmd.power_cap_agent import AgentMetrics, run_agent, serve_with_probes, stall_limit_s
from tests.cli.test_cli_health import Clock, get


class BlockingAgent:
    """`sync()` returns at once, except the sync numbered `hang_at`, which blocks until `release` is set: an NVML
    call that does not return. The sync after it stops the loop."""

    def __init__(self, hang_at: int, stop: threading.Event, fail: bool = False) -> None:
        self.hang_at, self.stop, self.fail = hang_at, stop, fail
        self.calls = 0
        self.hung, self.release = threading.Event(), threading.Event()

    def sync(self) -> dict[str, float]:
        self.calls += 1
        if self.calls == self.hang_at:
            self.hung.set()
            self.release.wait(30)
        elif self.calls > self.hang_at:
            self.stop.set()
        if self.fail:
            raise RuntimeError("NVML: GPU is lost")
        return {}


@pytest.fixture
def served():
    registry, clock = CollectorRegistry(), Clock()
    health = Health(stall_limit_s(10.0, 10.5), clock=clock)
    server = serve_with_probes(registry, health, 0, addr="127.0.0.1")
    yield registry, clock, health, server.port
    server.close()


@pytest.mark.parametrize("fail", [False, True], ids=["syncs that apply", "syncs that fail"])
def test_a_sync_stuck_past_the_limit_fails_liveness_and_one_that_ends_makes_it_live_again(served, fail):
    """A failing sync still ends: failures are for the alert, a restart would not mend an API server down."""
    registry, clock, health, port = served
    assert get(port, "/readyz")[0] == 503 and get(port, "/healthz")[0] == 200   # not synced yet, but starting
    stop = threading.Event()
    agent = BlockingAgent(hang_at=2, stop=stop, fail=fail)
    loop = threading.Thread(target=run_agent, args=(agent, AgentMetrics(registry), 0.0, stop),
                            kwargs={"beat": health.beat}, daemon=True)
    loop.start()
    assert agent.hung.wait(10)   # the first sync ended (a beat), the second hangs
    assert get(port, "/readyz")[0] == 200
    clock.now += 60
    assert get(port, "/healthz") == (200, "ok: the last iteration ended 60 s ago\n")
    clock.now += 1
    assert get(port, "/healthz") == (503, "stalled: the last iteration ended 61 s ago (limit 60 s)\n")
    assert get(port, "/readyz")[0] == 503
    agent.release.set()
    loop.join(10)
    assert not loop.is_alive() and get(port, "/healthz")[0] == 200


def test_metrics_are_still_the_agents_own_exposition(served):
    registry, _, _, port = served
    AgentMetrics(registry).syncs.labels(result="applied").inc()
    status, text = get(port, "/metrics")
    assert status == 200 and 'gputide_power_cap_agent_syncs_total{result="applied"} 1.0' in text
    assert "_created" not in text   # written as the exporter writes it, not prometheus_client's default
    assert get(port, "/nothing")[0] == 404


@pytest.mark.parametrize("interval, limit", [(10.0, 60.0), (1.0, 60.0), (30.0, 150.0), (60.0, 300.0)])
def test_the_stall_limit_is_five_intervals_and_at_least_a_minute(interval, limit):
    assert stall_limit_s(interval, 10.5) == limit


def test_the_stall_limit_covers_a_sync_whose_read_runs_to_its_deadline():
    """The wait, then the node's read with its retry to the end (the agent's own API settings), then NVML."""
    read_s = call_budget_s(NodeAnnotationCaps(None, "n1").api)
    assert read_s == 10.5   # two tries of 5 s and the 0.5 s backoff between them
    assert stall_limit_s(10.0, read_s) >= 10.0 + read_s + 30.0
    assert stall_limit_s(10.0, 200.0) == 240.0
