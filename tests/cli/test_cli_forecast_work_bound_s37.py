"""`forecast backtest` refuses, exit 2, a --step finer than the trace's own and work it could not finish in time.

Before: `--step 1s` on a 600 s trace resampled it to 1.8M steps (under the loader's MAX_STEPS), all but one in 600
empty, and the backtest ran for over 400 s; a requests log at --step 1s, or one making more origins than a backtest
scores in reasonable time, ran on alike. The checks read the loaded trace only: no backtest runs in these tests.
"""

from __future__ import annotations

import pytest

from balancer.cli import main

BACKTEST = ["forecast", "backtest", "--models", "persistence", "--horizons", "1h"]


def _error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_a_step_finer_than_the_trace_s_own_is_refused(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{600 * i},{1 + i % 5}\n" for i in range(3000)))
    line = _error(capsys, main(BACKTEST + ["--trace", str(trace), "--step", "1s"]))
    assert line == (f"gputide: error: {trace}: field '--step': invalid value '1s'; allowed: a step no finer than the "
                    "trace's own (600s, the median gap between its times): a finer one leaves 599 of every "
                    "600 steps empty"), line


@pytest.fixture
def requests_log(tmp_path):
    log = tmp_path / "requests.csv"
    log.write_text("timestamp\n" + "".join(f"{20 * i}\n" for i in range(21 * 86400 // 20)))
    return log


def test_a_requests_log_at_a_step_too_fine_for_its_span_is_refused_naming_the_least(requests_log, capsys):
    line = _error(capsys, main(BACKTEST + ["--trace", str(requests_log), "--format", "requests", "--step", "1s"]))
    assert line.startswith(f"gputide: error: {requests_log}: field '--step': invalid value '1s'; allowed: a --step "
                           "of at least 40s over this trace's span"), line   # 37s, rounded up to divide 1h
    assert line.endswith("(1814381 steps x 86400 a day)"), line


@pytest.mark.parametrize("stride, shown", [([], "'1 (the default)'"), (["--stride", "1"], "1")])
def test_more_origins_than_a_backtest_scores_are_refused_naming_the_least_stride(requests_log, capsys, stride, shown):
    line = _error(capsys, main(BACKTEST + ["--trace", str(requests_log), "--format", "requests", "--step", "30s",
                                           *stride]))
    assert line.startswith(f"gputide: error: {requests_log}: field '--stride': invalid value {shown}; allowed: a "
                           "--stride of at least 2, or a coarser --step"), line
