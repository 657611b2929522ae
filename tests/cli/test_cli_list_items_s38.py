"""Comma-separated flags and compound durations (session 38, h2). An empty item was dropped without a word
(`forecast backtest --horizons 1h,,2h`, `prometheus --targets a:1,,b:2`, a trailing comma), a repeated address was
written twice into the scrape job, and `prometheus --scrape-interval 1m30s`, a duration Prometheus itself reads, was
refused: its parser took one unit only. Each refusal is exit 2, one line naming the flag, the value and why."""

from __future__ import annotations

import pytest
import yaml

from balancer.cli import main
from balancer.cmd.prometheus import LEAST_SCRAPE_S, MOST_SCRAPE_S
from tests.cli.test_cli_run_inputs import one_error_line

TRACE = "timestamp,value\n" + "".join(f"{600 * i},{1 + i % 5}\n" for i in range(50))
BACKTEST = ["forecast", "backtest", "--trace", "{tmp}/trace.csv"]
PROMETHEUS = ["prometheus", "--config-only"]


def _main(tmp_path, argv: list[str]) -> int:
    (tmp_path / "trace.csv").write_text(TRACE)
    return main([a.replace("{tmp}", str(tmp_path)) for a in argv])


@pytest.mark.parametrize("argv, flag, value", [
    ([*BACKTEST, "--horizons", "1h,,2h"], "--horizons", "1h,,2h"),
    ([*BACKTEST, "--horizons", "1h,2h,"], "--horizons", "1h,2h,"),
    ([*BACKTEST, "--horizons", ",1h"], "--horizons", ",1h"),
    ([*BACKTEST, "--models", "persistence,,seasonal_naive_daily"], "--models", "persistence,,seasonal_naive_daily"),
    ([*PROMETHEUS, "--targets", "a:1,,b:2"], "--targets", "a:1,,b:2"),
    ([*PROMETHEUS, "--targets", "a:1, ,b:2"], "--targets", "a:1, ,b:2"),
    ([*PROMETHEUS, "--targets", "a:1,"], "--targets", "a:1,"),
    ([*PROMETHEUS, "--targets", "a:1", "--controller", "c:3,,d:4"], "--controller", "c:3,,d:4"),
], ids=["horizons", "horizons trailing", "horizons leading", "models", "targets", "targets blank", "targets trailing",
        "controller"])
def test_an_empty_item_exits_2_naming_the_flag_and_value(tmp_path, capsys, argv, flag, value):
    code = _main(tmp_path, argv)
    line = one_error_line(capsys)
    assert code == 2, line
    assert line.startswith(f"gputide: error: field '{flag}': invalid value '{value}'; allowed: "), line
    assert "an empty item (two commas in a row, or one at an end) is not allowed" in line, line


@pytest.mark.parametrize("argv, flag, value", [
    ([*PROMETHEUS, "--targets", "a:1,a:1"], "--targets", "a:1"),
    ([*PROMETHEUS, "--targets", "a:1,b:2, a:1"], "--targets", "a:1"),
    ([*PROMETHEUS, "--targets", "a:1", "--controller", "c:3,c:3"], "--controller", "c:3"),
], ids=["targets", "targets among others", "controller"])
def test_a_repeated_address_exits_2_naming_it(tmp_path, capsys, argv, flag, value):
    code = _main(tmp_path, argv)
    line = one_error_line(capsys)
    assert code == 2, line
    assert line.startswith(f"gputide: error: field '{flag}': invalid value '{value}'; allowed: "), line
    assert f"each once ({value} is given twice)" in line, line


def test_a_compound_scrape_interval_is_written_as_prometheus_reads_it(capsys):
    assert main([*PROMETHEUS, "--targets", "127.0.0.1:9400", "--scrape-interval", "1m30s"]) == 0
    glob = yaml.safe_load(capsys.readouterr().out)["global"]
    # 90 s, as Prometheus reads 1m30s; a scrape's timeout is at most 10 s whatever the interval
    assert glob == {"scrape_interval": "1m30s", "scrape_timeout": "10s", "evaluation_interval": "1m30s"}


def test_a_compound_scrape_interval_keeps_the_shorter_rule_group_intervals(tmp_path):
    """With --out the rule files are copied, each group's own interval kept where it is shorter than the
    evaluation interval: 90 s here, so the recording group's 15 s and the 1 m group's stay as written."""
    assert main([*PROMETHEUS, "--targets", "127.0.0.1:9400", "--scrape-interval", "1m30s", "--out",
                 str(tmp_path)]) == 0
    groups = yaml.safe_load((tmp_path / "rules" / "gputide-recording.yaml").read_text())["groups"]
    assert sorted(g["interval"] for g in groups if "interval" in g) == ["15s", "1m"]


@pytest.mark.parametrize("value, near_miss", [("1m30s", "1m31s"), ("1m30s", "1h30m"), ("1s500ms", "0m0s"),
                                              ("1m30s", "30s1m"), ("1m30s", "1m1m"), ("1m30s", "1m 30s")],
                         ids=["past 90s", "an hour and a half", "zero parts", "out of order", "a unit twice",
                              "a space"])
def test_a_compound_interval_is_taken_and_its_near_miss_keeps_the_range_message(capsys, value, near_miss):
    assert main([*PROMETHEUS, "--targets", "127.0.0.1:9400", "--scrape-interval", value]) == 0
    capsys.readouterr()
    code = main([*PROMETHEUS, "--targets", "127.0.0.1:9400", "--scrape-interval", near_miss])
    line = one_error_line(capsys)
    assert code == 2, line
    assert line.startswith(f"gputide: error: field '--scrape-interval': invalid value {near_miss!r}; allowed: a "
                           f"Prometheus duration from {LEAST_SCRAPE_S:g}s to {MOST_SCRAPE_S:g}s"), line


@pytest.mark.parametrize("value", ["1w", "1d12h"])
def test_a_retention_in_prometheus_units_is_taken(monkeypatch, value):
    """--retention goes to Prometheus' --storage.tsdb.retention.time, which reads weeks and compound durations."""
    ran = []
    monkeypatch.setattr("balancer.cmd.prometheus._run_foreground", lambda args, *a: ran.append(args.retention) or 0)
    assert main(["prometheus", "--run", "--targets", "127.0.0.1:9400", "--retention", value]) == 0
    assert ran == [value]


@pytest.mark.parametrize("stages", ["live,,place", "live,place,", ",live", "live, ,place"],
                         ids=["two commas", "trailing", "leading", "blank"])
def test_demo_stages_with_an_empty_item_exits_2_before_running(tmp_path, capsys, monkeypatch, stages):
    """`demo --stages live,,place,` ran ('live', 'place') without a word, as the other comma lists did (m2)."""
    ran = []
    monkeypatch.setattr("balancer.app.demo.run_demo", lambda *a, **kw: ran.append(kw.get("stages")))
    code = main(["demo", "--stages", stages, "--out", str(tmp_path / "demo")])
    line = one_error_line(capsys)
    assert (code, ran) == (2, []), line
    assert line.startswith(f"gputide: error: field '--stages': invalid value '{stages}'; allowed: comma-separated "
                           "stages of live, hotspot, tidal, forecast, place; an empty item (two commas in a row, or "
                           "one at an end) is not allowed"), line
