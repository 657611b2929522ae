"""`gputide exporter --power-caps-file`: the embedded power-cap agent's failures are logged and counted on the
exporter's port as `gputide power-cap-agent` counts them (`gputide_power_cap_agent_syncs_total{result="failed"}`), and
the exporter keeps serving. Before, a failed sync (`agent.failed`: the file malformed, NVML refusing a GPU) went
unsaid, and an exception raised by `sync()` stopped the exporter."""

from __future__ import annotations

import logging

import pytest

from balancer.cmd import power_cap_agent


@pytest.fixture
def agent_metrics(monkeypatch) -> list[power_cap_agent.AgentMetrics]:
    """The agent metrics the exporter builds (on its own registry), to read what it counted."""
    built = []

    class Recorded(power_cap_agent.AgentMetrics):
        def __init__(self, registry) -> None:
            super().__init__(registry)
            self.registry = registry
            built.append(self)

    monkeypatch.setattr(power_cap_agent, "AgentMetrics", Recorded)
    return built


def exporter(caps_file) -> int:
    from balancer.cli import main

    return main(["exporter", "--backend", "sim", "--port", "0", "--listen", "127.0.0.1", "--duration", "0.5",
                 "--caps-interval", "0.05", "--power-caps-file", str(caps_file)])


def failed_syncs(metrics: power_cap_agent.AgentMetrics) -> float:
    return metrics.registry.get_sample_value("gputide_power_cap_agent_syncs_total", {"result": "failed"})


def test_a_malformed_caps_file_is_a_failed_sync_logged_and_counted(tmp_path, agent_metrics, caplog):
    caps = tmp_path / "caps.json"
    caps.write_text('{"GPU-0": "hot"}')
    with caplog.at_level(logging.ERROR):
        assert exporter(caps) == 0
    metrics, = agent_metrics
    assert failed_syncs(metrics) >= 2   # every interval, not once
    assert sum("power caps sync failed" in r.getMessage() for r in caplog.records) == 1   # once per reason


def test_an_exception_from_the_agent_is_counted_and_the_exporter_keeps_serving(tmp_path, agent_metrics, monkeypatch,
                                                                               caplog):
    import exporters.power_caps

    class Broken:
        def __init__(self, source, target, *args, **kwargs) -> None:
            self.syncs = 0

        def sync(self):
            self.syncs += 1
            raise RuntimeError("NVML gone")

    monkeypatch.setattr(exporters.power_caps, "PowerCapAgent", Broken)
    with caplog.at_level(logging.ERROR):
        assert exporter(tmp_path / "caps.json") == 0   # ran its whole --duration
    metrics, = agent_metrics
    assert failed_syncs(metrics) >= 2
    assert any("NVML gone" in r.getMessage() for r in caplog.records)


def test_the_exporters_power_cap_sync_runs_watched_by_the_probes(tmp_path, agent_metrics, monkeypatch):
    """The embedded agent's sync shares NVML (and the backend's lock) with the collections; one stuck in a
    power-limit call must fail the probes even when nothing scrapes (CollectHealth.watching): while a sync runs,
    the exporter's probes, read as if it had run for hours, answer not ready and not live, naming the sync."""
    import exporters.health
    import exporters.power_caps

    healths, seen = [], []

    class Recorded(exporters.health.CollectHealth):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            healths.append(self)

    class Slow:
        def __init__(self, source, target, *args, **kwargs) -> None:
            self.failed = {}

        def sync(self):
            health, = healths
            if health.last_ok is None:   # the first collection (its own thread) has not ended yet
                return {}
            real = health.clock
            health.clock = lambda: real() + 36_000.0   # ten hours into this sync
            try:
                seen.append((health.ready(), health.live()))
            finally:
                health.clock = real
            return {}

    monkeypatch.setattr(exporters.health, "CollectHealth", Recorded)
    monkeypatch.setattr(exporters.power_caps, "PowerCapAgent", Slow)
    assert exporter(tmp_path / "caps.json") == 0
    assert seen, "no sync ran after the first collection"
    (ready, why), (live, why_live) = seen[-1]
    assert not ready and "power-cap" in why
    assert not live and "power-cap" in why_live
