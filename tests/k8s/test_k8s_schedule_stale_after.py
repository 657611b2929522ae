"""`gputide schedule --stale-after`: how old a GPU's newest reading may be before the scheduler places its node
without the GPU's thermal headroom.

The scheduler built its Prometheus source without a limit, so per-GPU facts went stale at four 15 s scrapes (60 s)
whatever the operator set: where GPUs are scraped every 60 s (readings up to about 77 s old) every node lost its
thermal score now and then, while `gputide run` took the same readings as fresh. The limit is now `--stale-after`,
with `gputide run`'s meaning and bounds: by default 120 s (the default spec.safety.maxTelemetryAgeS, the age
GpuTelemetryStale fires at), refused below 45 s and above 120 s. A GPU past it is left out of the facts, and its
node is scored as one Prometheus does not know (no thermal headroom), as with missing facts.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

from balancer.cli import build_parser, main
from balancer.cmd import schedule as schedule_cmd
from balancer.telemetry.promserver import Target

LATE_S = 90.0   # a GPU scraped every 60 s reads up to about 77 s old; this one is older still, and under 120 s


def view(name: str) -> dict:
    return {"name": name, "gpu_model": "NVIDIA-H100-80GB-HBM3", "gpus_total": 2, "gpus_free": 2, "gpus_usable": 2,
            "cpu_milli_total": 64000, "cpu_milli_free": 64000, "memory_mib_total": 262144,
            "memory_mib_free": 262144}


def exposition(now: float) -> str:
    """The recording rules' two series the facts join, as Prometheus would hold them: node `fresh` read just now,
    node `late` LATE_S ago (gpu:last_sample:timestamp_seconds is the scrape's own time)."""
    lines = []
    for host, read_at in (("fresh", now), ("late", now - LATE_S)):
        for gpu in (0, 1):
            labels = f'hostname="{host}",gpu="{gpu}",UUID="GPU-{host}-{gpu}"'
            lines += [f"gpu:temperature_headroom:celsius{{{labels}}} {20 + gpu}",
                      f"gpu:last_sample:timestamp_seconds{{{labels}}} {read_at}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def started(module_prometheus_factory, module_metrics_server):
    exporter = module_metrics_server(exposition(time.time()))
    prom = module_prometheus_factory([Target("rules", exporter.address)])
    prom.wait_for("count(gpu:last_sample:timestamp_seconds)", lambda r: bool(r) and r[0]["value"][1] == "4",
                  timeout=30)
    return exporter, prom


@pytest.fixture
def prometheus(started):
    """Prometheus holding readings stamped as the test begins. Stamped once as the module began, the late node's
    passed 120 s old (and the fresh one's 60 s) whenever Prometheus took 30 s to start on a loaded machine."""
    exporter, prom = started
    now = time.time()
    exporter.text = exposition(now)
    prom.wait_for(f'count(gpu:last_sample:timestamp_seconds{{hostname="fresh"}} >= {now!r})',
                  lambda r: bool(r) and r[0]["value"][1] == "2", timeout=30)
    return prom


def headroom(prometheus_url: str, *flags: str) -> dict[str, list[float]]:
    """Each node's per-GPU thermal headroom as the placer built from `gputide schedule`'s arguments scores it."""
    args = build_parser().parse_args(["schedule", "--prometheus", prometheus_url, *flags])
    placer = schedule_cmd.build_placer(args)
    state = placer.cluster([view("fresh"), view("late")])
    return {name: state.temp_headroom[i][:2].tolist() for i, name in enumerate(state.names)}


@pytest.mark.integration
@pytest.mark.parametrize(("flags", "late"), [
    ((), [20.0, 21.0]),
    (("--stale-after", "1m"), None),
    (("--stale-after", "2m"), [20.0, 21.0]),
], ids=["by default (120 s) a reading 90 s old is used", "past --stale-after it is not: no thermal headroom",
        "under --stale-after it is"])
def test_a_gpu_older_than_stale_after_is_scored_without_its_thermal_headroom(prometheus, flags, late, caplog):
    with caplog.at_level(logging.INFO, logger=schedule_cmd.__name__):
        got = headroom(prometheus.url, *flags)
    assert got["fresh"] == [20.0, 21.0]
    if late is None:
        assert np.isnan(got["late"]).all(), got   # as a node Prometheus does not know
    else:
        assert got["late"] == late
    limit = dict(zip(flags[::2], flags[1::2], strict=True)).get("--stale-after", "2m")
    assert f"older than {60 * int(limit[0]):.0f} s is placed without its thermal headroom" in caplog.text


@pytest.mark.parametrize("value", ["44s", "30s", "0", "-1m", "121s", "3m", "inf", "nan", "soon"])
def test_a_stale_after_out_of_range_exits_2_naming_the_flag(capsys, value):
    assert main(["schedule", "--once", "--prometheus", "http://127.0.0.1:1", f"--stale-after={value}"]) == 2
    err = capsys.readouterr().err
    assert f"field '--stale-after': invalid value '{value}'; allowed: a duration from 45s" in err, err
    assert "to 120s (the age GpuTelemetryStale fires at, gputide run's default)" in err, err


def test_stale_after_without_prometheus_exits_2(capsys):
    assert main(["schedule", "--once", "--stale-after", "1m"]) == 2
    err = capsys.readouterr().err
    assert "field '--stale-after': invalid value '1m'; allowed: only with --prometheus" in err, err


def test_the_default_is_gputide_runs():
    from balancer.cmd.run import stale_after as run_stale_after
    from balancer.config import BalancerPolicy

    assert schedule_cmd.stale_after(None) == run_stale_after(None, BalancerPolicy(), None) == 120.0
    assert schedule_cmd.stale_after("45s") == 45.0
