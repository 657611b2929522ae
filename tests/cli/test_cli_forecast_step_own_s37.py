"""`forecast backtest --step` equal to the step the loader itself uses is accepted, though some values are empty
(audit s37a9 item 2).

Before: a 1-min csv with every other value empty ran without --step (at 60 s), yet `--step 1min` was refused as
finer than the trace's own step, read off the gaps between its observed steps (120 s). A --step finer than the
loader's step is still refused, naming that step. The runs end at a later check (--min-train-days): no backtest runs.
"""

from __future__ import annotations

from balancer.cli import main

BACKTEST = ["forecast", "backtest", "--models", "persistence", "--horizons", "1h", "--min-train-days", "1000"]


def _every_other_empty(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,value\n" + "".join(
        f"{1704067200 + 60 * i},{'' if i % 2 else 100 + i % 7}\n" for i in range(3000)))
    return trace


def _error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_a_step_equal_to_the_loader_s_own_is_accepted_beside_empty_values(tmp_path, capsys):
    trace = _every_other_empty(tmp_path)
    line = _error(capsys, main(BACKTEST + ["--trace", str(trace), "--step", "1min"]))
    assert "field '--min-train-days'" in line, line   # past the --step check


def test_a_step_finer_than_the_loader_s_own_is_refused_naming_it(tmp_path, capsys):
    trace = _every_other_empty(tmp_path)
    line = _error(capsys, main(BACKTEST + ["--trace", str(trace), "--step", "30s"]))
    assert line == (f"gputide: error: {trace}: field '--step': invalid value '30s'; allowed: a step no finer than the "
                    "trace's own (60s, the median gap between its times): a finer one leaves 3 of every 4 steps "
                    "empty"), line
