"""`gputide prometheus --scrape-interval` is bounded (audit s37, h11): 1ms, 10m and 1000d were all written into
prometheus.yml. Below 1 s is refused (faster than an exporter collects), and so is anything above 90 s: a reading's
age then outgrows, between scrapes, the 120 s at which GpuTelemetryStale fires and past which the controller holds
still (`gputide run --stale-after` is at least the scrape interval + 30 s, and at most 120 s by default). Exit 2,
one line naming the flag, the value and the range, for --config-only and --run alike."""

from __future__ import annotations

import pytest
import yaml

from balancer.cli import main
from balancer.cmd.prometheus import LEAST_SCRAPE_S, MOST_SCRAPE_S
from tests.cli.test_cli_run_inputs import one_error_line


@pytest.mark.parametrize("mode", ["--config-only", "--run"])
@pytest.mark.parametrize("value", ["1ms", "500ms", "91s", "2m", "10m", "1000d", "fast"])
def test_an_interval_out_of_range_exits_2_naming_it(capsys, monkeypatch, mode, value):
    # never a real Prometheus in the foreground: were the interval passed, --run would return 0 here, not hang
    monkeypatch.setattr("balancer.cmd.prometheus._run_foreground", lambda *a: 0)
    code = main(["prometheus", mode, "--targets", "127.0.0.1:9400", "--scrape-interval", value])
    line = one_error_line(capsys)
    assert code == 2, line
    assert line.startswith(f"gputide: error: field '--scrape-interval': invalid value {value!r}; allowed: a "
                           f"Prometheus duration from {LEAST_SCRAPE_S:g}s to {MOST_SCRAPE_S:g}s"), line


@pytest.mark.parametrize("value", ["1s", "5s", "15s", "1m", "90s"])
def test_an_interval_in_range_is_written(capsys, value):
    assert main(["prometheus", "--config-only", "--targets", "127.0.0.1:9400", "--scrape-interval", value]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["global"]["scrape_interval"] == value


def test_the_range_is_said_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["prometheus", "--help"])
    assert f"{LEAST_SCRAPE_S:g}s to {MOST_SCRAPE_S:g}s" in " ".join(capsys.readouterr().out.split())
