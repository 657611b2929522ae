"""A horizon of the default --horizons that the trace's step cannot take is said to be the default.

Before: `backtest --step 7min` on a 10-minute trace was refused naming `'--horizons' '1h'`, a value the user never
typed, and nothing said where it came from or that giving --horizons was the way out.
"""

from __future__ import annotations

from balancer.cli import main

BACKTEST = ["forecast", "backtest", "--models", "persistence", "--step", "7min"]


def _error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    return err.strip()


def _trace(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{600 * i},{1 + i % 5}\n" for i in range(3000)))
    return trace


def test_the_default_horizon_is_named_as_the_default(tmp_path, capsys):
    trace = _trace(tmp_path)
    line = _error(capsys, main(BACKTEST + ["--trace", str(trace)]))
    assert line == (f"gputide: error: {trace}: field '--horizons': invalid value '1h (the default --horizons "
                    "1h,4h,24h)'; allowed: multiples of the trace's step (420s), here --step 7min; give --horizons of "
                    "such durations"), line


def test_a_horizon_typed_is_named_as_typed(tmp_path, capsys):
    trace = _trace(tmp_path)
    line = _error(capsys, main(BACKTEST + ["--trace", str(trace), "--horizons", "1h"]))
    assert line == (f"gputide: error: {trace}: field '--horizons': invalid value '1h'; allowed: multiples of the "
                    "trace's step (420s), here --step 7min"), line
