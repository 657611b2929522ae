"""`gputide exporter --power-caps-file`: the power-cap agent's sync and the collections share one NVML backend, and its
lock (exporters/backends/nvml.py), so a power-limit call that never returns holds the lock and the next collection
waits behind it. Scrapes were never held up by it: the collection limits of exporters/health.py apply to the
collection waiting for the lock (answered within the collection timeout from the last complete one, then 503; not
ready; not live after --stuck-after), and the cap stuck in the call is not recorded as set. But only a scrape starts
a collection: with none, /healthz answered 200 for good while the agent's sync was stuck and no cap was applied
again. A sync run inside `CollectHealth.watching` is now held to the same limits by the probes themselves.

The hung call is an Event set only when the test ends; nothing here waits out a timeout: the scrapes' waits for a
collection blocked behind the agent let the test's clock's time pass instead (as tests/exporters/
test_exporter_collect_timeout.py does), and every real wait is bounded."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from balancer.cmd.power_cap_agent import AgentMetrics, sync_once
from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.collector import GpuCollector
from exporters.health import CollectHealth, TrackedCollector, first_collection
from exporters.power_caps import PowerCapAgent
from exporters.power_limits_before import LimitsBefore
from exporters.server import RunningServer, serve
from tests.cli.test_cli_health import Clock, get

BOUND_S = 10.0   # the most a test waits for a thread to get somewhere (it takes milliseconds)
DEADLINE_S = 60.0
SYNC = "the power-cap agent's sync"


class Caps:
    def read(self) -> dict[str, float]:
        return {"GPU-0": 300.0}


@dataclass
class Node:
    nvml: FakeNvml
    device: FakeDevice
    clock: Clock
    health: CollectHealth
    server: RunningServer
    agent: PowerCapAgent
    metrics: AgentMetrics
    state: Path
    inside: threading.Event   # the agent is in nvmlDeviceSetPowerManagementLimit
    release: threading.Event  # ... which returns once this is set

    def hung(self) -> bool:
        return self.inside.is_set() and not self.release.is_set()

    def sync(self, watched: bool) -> threading.Thread:
        """The agent's sync in a thread of its own (the exporter's main loop), inside `watching` if `watched`; once
        it is in the power-limit call that hangs."""
        def run() -> None:
            if watched:
                with self.health.watching(SYNC):
                    sync_once(self.agent, self.metrics)
            else:
                sync_once(self.agent, self.metrics)

        thread = threading.Thread(target=run, name="test-agent-sync", daemon=True)
        thread.start()
        assert self.inside.wait(BOUND_S)
        return thread


@contextmanager
def exporter(tmp_path: Path) -> Iterator[Node]:
    """An exporter on a fake NVML with a power-cap agent whose power-limit call hangs until `release`; its first
    collection done. On leaving, the hung call returns and the server closes, whatever the test asserted."""
    device = FakeDevice(uuid="GPU-0", minor=0)
    nvml = FakeNvml([device])
    # the reads' deadline, which the agent's calls now keep too (test_exporter_power_cap_late_set), out of the way:
    # the call here holds the lock until the test releases it, however slow the machine
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    inside, release = threading.Event(), threading.Event()
    set_limit = nvml.nvmlDeviceSetPowerManagementLimit

    def hangs(h, mw):
        inside.set()
        release.wait(30)
        return set_limit(h, mw)

    nvml.nvmlDeviceSetPowerManagementLimit = hangs
    clock = Clock()

    def wait(done: threading.Event, timeout: float) -> bool:
        if inside.is_set() and not release.is_set():   # behind the hung call: the timeout passes at once
            clock.now += timeout
            return done.is_set()
        return done.wait(BOUND_S)

    registry = CollectorRegistry()
    registry.register(GpuCollector(backend))
    metrics = AgentMetrics(registry)
    health = CollectHealth(clock=clock, wait=wait)   # the defaults: stuck after 300 s, timeout 8 s, stale for 30 s
    server = serve(registry, port=0, health=health)
    state = tmp_path / "limits.json"
    node = Node(nvml, device, clock, health, server, PowerCapAgent(Caps(), backend, LimitsBefore(state)), metrics,
                state, inside, release)
    try:
        first_collection(TrackedCollector(registry, health)).join(BOUND_S)
        assert health.ready() == (True, "ok: the last collection ended 0 s ago")
        yield node
    finally:
        release.set()
        server.close()
        for t in threading.enumerate():
            if t.name in ("gputide-collection", "test-agent-sync"):
                t.join(BOUND_S)


def scrape(port: int) -> tuple[int, dict[str, float]]:
    got: list[tuple[int, str]] = []
    t = threading.Thread(target=lambda: got.append(get(port, "/metrics")), daemon=True)
    t.start()
    t.join(BOUND_S)
    assert got, "the scrape waited for the hung power-limit call"
    code, text = got[0]
    if code != 200:
        return code, {}
    return code, {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
                  if s.name in ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gputide_exporter_collect_timeouts_total")}


def applied(node: Node) -> dict[str, float]:
    """The agent's applied-watts series, read without collecting the registry (that would read NVML, and wait)."""
    return {s.labels["UUID"]: s.value for s in node.metrics.applied.collect()[0].samples}


def test_a_hung_power_limit_call_keeps_no_scrape_waiting_and_its_cap_is_not_recorded_as_set(tmp_path):
    with exporter(tmp_path) as node:
        syncing = node.sync(watched=False)
        # the scrape's collection waits for the lock the agent holds: answered within the collection timeout, from
        # the last complete collection (the limit as it was), the timeout counted
        assert scrape(node.server.port) == (200, {"DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0,
                                                  "gputide_exporter_collect_timeouts_total": 1.0})
        node.clock.now += 1
        assert get(node.server.port, "/readyz") == (503, "not ready: a collection has been running for 9 s "
                                                         "(timeout 8 s)\n")
        assert get(node.server.port, "/healthz") == (200, "ok: a collection has been running for 9 s\n")
        node.clock.now += 22   # the last complete collection began 31 s ago: no longer served
        assert scrape(node.server.port)[0] == 503
        node.clock.now += 270
        assert get(node.server.port, "/healthz") == (503, "stuck: a collection has been running for 301 s "
                                                          "(limit 300 s)\n")
        # nothing says the cap is set while the call has not returned (pending: a restart judges it from the
        # limit, 700 W, not landed, and applies it again)
        assert node.device.limit_mw == 700_000 and node.agent._applied == {}
        assert json.loads(node.state.read_text()) == {"GPU-0": {"before_w": 700.0, "pending_w": 300.0}}
        assert applied(node) == {}
        node.release.set()
        syncing.join(BOUND_S)
        assert json.loads(node.state.read_text()) == {"GPU-0": {"before_w": 700.0, "set_w": 300.0}}
        assert applied(node) == {"GPU-0": 300.0}


def test_a_hung_power_cap_sync_fails_the_probes_without_any_scrape(tmp_path):
    with exporter(tmp_path) as node:
        syncing = node.sync(watched=True)
        node.clock.now += 8
        assert get(node.server.port, "/readyz") == (200, "ok: the last collection ended 8 s ago\n")
        node.clock.now += 1
        assert get(node.server.port, "/readyz") == (503, f"not ready: {SYNC} has been running for 9 s (timeout 8 s)\n")
        assert get(node.server.port, "/healthz") == (200, "ok: the last collection ended 9 s ago\n")
        node.clock.now += 292
        stuck = f"stuck: {SYNC} has been running for 301 s (limit 300 s)\n"
        assert get(node.server.port, "/healthz") == (503, stuck)
        assert get(node.server.port, "/readyz") == (503, stuck)
        assert node.agent._applied == {} \
            and json.loads(node.state.read_text()) == {"GPU-0": {"before_w": 700.0, "pending_w": 300.0}}
        node.release.set()
        syncing.join(BOUND_S)
        assert not syncing.is_alive() and node.device.limit_mw == 300_000
        assert get(node.server.port, "/healthz")[0] == 200 and get(node.server.port, "/readyz")[0] == 200


def test_the_probes_name_whichever_has_run_longest_a_collection_or_the_sync():
    """A sync waiting for the lock behind a hung collection is not the cause: the probes name the older one."""
    clock = Clock()
    health = CollectHealth(clock=clock)
    health.end(health.begin(), ok=True)
    token = health.begin()   # a collection that hangs
    clock.now += 50
    with health.watching(SYNC):
        clock.now += 251
        assert health.live() == (False, "stuck: a collection has been running for 301 s (limit 300 s)")
    health.end(token, ok=True)
    with health.watching(SYNC):
        clock.now += 1
        token = health.begin()   # a collection waiting behind the hung sync
        clock.now += 8
        assert health.ready() == (False, f"not ready: {SYNC} has been running for 9 s (timeout 8 s)")
        assert health.live() == (True, "ok: a collection has been running for 8 s")
    health.end(token, ok=True)
    assert health.ready() == (True, "ok: the last collection ended 0 s ago")
