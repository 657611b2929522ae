"""A `timestamp,value` demand trace read as `--format requests` is refused, naming the column and `--format csv`.

Before: its rows were counted, one request each, and `value` silently ignored: a trace of thousands of req/s loaded
as one request a step (exit 0). A requests log with another column at irregular times, or several requests at one
time in unequal numbers, is still read as one (`value` then may be anything the log records); exactly two at every
time, evenly spaced, with a numeric value, is two series sampled together and refused (audit a20).
"""

from __future__ import annotations

import numpy as np
import pytest

from balancer.errors import InputError
from balancer.forecast.traces import load_demand


def _write(path, text):
    path.write_text(text)
    return path


def test_a_demand_trace_read_as_requests_is_refused(tmp_path):
    trace = _write(tmp_path / "t.csv", "Timestamp,Value\n" + "".join(f"{60 * i},{5000 + i}\n" for i in range(30)))
    with pytest.raises(InputError) as info:
        load_demand(trace, "requests")
    message = str(info.value)
    assert message.startswith(f"{trace}: field 'value': invalid value 'a column of 30 numbers'; allowed: a requests "
                              "log"), message
    assert "--format csv" in message and "ignore 'value'" in message, message


@pytest.mark.parametrize("text", [
    pytest.param("timestamp,value,latency_s\n" + "".join(f"{t},{t % 3},0.2\n" for t in np.cumsum([1, 9, 2, 20] * 20)),
                 id="another column, irregular times"),   # evenly spaced: a demand trace with a column more (s38)
    pytest.param("timestamp,value\n" + "".join(f"{10 * j},{j + n}\n" for j in range(60) for n in range(1 + j % 3)),
                 id="several requests at one time, one to three"),   # exactly two at each: refused (a20)
    pytest.param("timestamp,value\n" + "".join(f"{i},ok\n" for i in range(0, 600, 5)), id="value not numbers"),
])
def test_a_requests_log_with_a_value_column_is_still_counted(tmp_path, text):
    y = load_demand(_write(tmp_path / "r.csv", text), "requests", step="1min")
    assert y.dropna().gt(0).all() and y.notna().sum() >= 2


def test_exactly_two_requests_at_each_time_with_a_numeric_value_is_refused(tmp_path):
    """s37's 'two requests at one time' case, an exact-rate synthetic log: exactly two rows at each time, 10 s apart,
    `value` numbers. Counted before (any repeated time made a log); refused now as two series sampled together, since
    real logs' per-time counts vary (the unequal-counts case above is counted)."""
    log = _write(tmp_path / "r.csv", "timestamp,value\n" + "".join(f"{i - i % 10},{i}\n" for i in range(0, 600, 5)))
    with pytest.raises(InputError) as info:
        load_demand(log, "requests", step="1min")
    message = str(info.value)
    assert message.startswith(f"{log}: field 'value': invalid value 'a column of 120 numbers'"), message
    assert "each of its 60 times given 2 times: 2 series" in message and "sum(...)" in message, message
