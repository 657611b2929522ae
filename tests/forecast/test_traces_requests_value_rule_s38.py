"""Which files with a numeric `value` `--format requests` counts as a log and which it refuses as series sampled
together: one rule, with no label heuristics (audit a20 of da017946).

The rule: a `value` column of numbers, the same number k of rows at each distinct time and the distinct times evenly
spaced, is refused (k > 1: export one series, such as sum(...)). Before, `_series_labels` also weighed how many
distinct values each other column had: rounding a latency column flipped a log between counted and refused, and
exports with a whole-number `gpu_util`, a 0/1 `up`, a `pod` label changed once, or an `instance` beside a trace every
500 ms were counted as logs. Synthetic logs at an exact rate now read as k series and are refused: real logs' counts
per time vary, and those are counted.
"""

from __future__ import annotations

import numpy as np
import pytest

from balancer.errors import InputError
from balancer.forecast.traces import load_demand

START = 1704067200   # 2024-01-01T00:00:00Z
SECONDS = 3600


def _log(tmp_path, header, rows):
    path = tmp_path / "r.csv"
    path.write_text(header + "\n" + "".join(f"{r}\n" for r in rows))
    return path


def _counted(path, rate):
    """Read as a log at a 1-minute step: every whole minute holds `rate` requests a second."""
    y = load_demand(path, "requests", step="1min")
    assert y.notna().sum() >= 50, y
    assert np.allclose(y.dropna(), rate), y.dropna().unique()


def _refused(path, rows, times, k):
    with pytest.raises(InputError) as info:
        load_demand(path, "requests", step="1min")
    message = str(info.value)
    assert message.startswith(f"{path}: field 'value': invalid value 'a column of {rows} numbers'; allowed: a "
                              "requests log"), message
    if k > 1:
        assert "export one series, such as sum(...) of them, and read it with --format csv" in message, message
        assert f"each of its {times} times given {k} times: {k} series" in message, message
    else:
        assert "demand trace: --format csv" in message, message
    assert "rename or drop `value`" in message, message


def _rng(seed):
    return np.random.default_rng(seed)


EXACT_RATE = [
    pytest.param("timestamp,model,value", lambda s, j: f"{START + s},llama-3-8b,{100 + (5 * s + j) % 50}", 5,
                 id="one model at exactly 5 req/s"),
    pytest.param("timestamp,request_id,value", lambda s, j: f"{START + s},req-{5 * s + j:08d},{100 + j}", 5,
                 id="a request id, exactly 5 req/s"),
    pytest.param("timestamp,model,value", lambda s, j: f"{START + s},{('llama', 'mistral')[(s * 7 + j) % 3 % 2]},"
                 f"{100 + j}", 2, id="two models mixed, exactly 2 req/s"),
    pytest.param("timestamp,model,latency_ms,value", lambda s, j: f"{START + s},{'abc'[j]},{50 + (s * 31 + j) % 850},"
                 f"{100 + j}", 3, id="a latency in whole ms, one request per model each second"),
    pytest.param("timestamp,model,latency_s,value", lambda s, j: f"{START + s},{'abc'[j]},"
                 f"{0.05 + ((s * 31 + j) % 850) / 1000 + 1e-6 * j:.6f},{100 + j}", 3,
                 id="the same latency in seconds to 6 places"),
]


@pytest.mark.parametrize("header, row, k", EXACT_RATE)
def test_an_exact_rate_synthetic_log_with_a_numeric_value_is_refused(tmp_path, header, row, k):
    """Exact-rate synthetic logs, stamped to the second, exactly k requests at every second: the rows at each time
    are what k series sampled together give, and `value` is numbers. Counted before (each by one label check of
    `_series_labels`; the latency cases one way or the other by how the column was rounded); refused now. Real logs'
    per-second counts vary (the Poisson and unequal-count cases below are counted); this one is read once `value` is
    renamed."""
    path = _log(tmp_path, header, (row(s, j) for s in range(SECONDS) for j in range(k)))
    _refused(path, SECONDS * k, SECONDS, k)


def test_renaming_value_reads_an_exact_rate_log(tmp_path):
    """The way out the error names: the same exact-rate log with `value` renamed is counted, 5 req/s."""
    rows = (f"{START + s},llama-3-8b,{100 + j}" for s in range(SECONDS) for j in range(5))
    _counted(_log(tmp_path, "timestamp,model,tokens", rows), 5.0)


def test_a_load_generator_every_200_ms_with_a_numeric_value_is_refused(tmp_path):
    """An exact-rate synthetic log: a request every 200 ms, each logged with its model and tokens as `value`, each
    time once and evenly spaced, as a demand trace every 200 ms is. Counted before (any file with a column besides
    timestamp and value was arrivals under 1 s); refused now at any spacing."""
    path = _log(tmp_path, "timestamp,model,value", (f"{START + 0.2 * i:.3f},llama-3-8b,{100 + i % 50}"
                                                    for i in range(5 * SECONDS)))
    _refused(path, 5 * SECONDS, 5 * SECONDS, 1)


def test_unequal_counts_per_second_are_counted(tmp_path):
    """A log stamped to the second, one to three requests a second, one model: its first second holds one, and
    taken for one row a time (its distinct times a second apart), it would be a demand trace."""
    per = _rng(7).integers(1, 4, SECONDS)
    per[0] = 1
    rows = (f"{START + s},llama-3-8b,{100 + j}" for s in range(SECONDS) for j in range(per[s]))
    y = load_demand(_log(tmp_path, "timestamp,model,value", rows), "requests", step="1min")
    assert y.notna().sum() >= 50, y
    whole = per[: 60 * (SECONDS // 60)].reshape(-1, 60).sum(axis=1) / 60
    assert np.allclose(y.dropna(), whole[:y.notna().sum()]), (y.dropna().head(), whole[:3])


@pytest.mark.parametrize("header, row", [
    pytest.param("timestamp,value", lambda rng, s, j: f"{START + s},{rng.integers(10, 4000)}", id="bare"),
    pytest.param("timestamp,model,latency_ms,value", lambda rng, s, j: f"{START + s},{('a', 'b')[rng.integers(2)]},"
                 f"{rng.integers(50, 900)},{rng.integers(10, 4000)}", id="two models and a latency"),
])
@pytest.mark.parametrize("rate", [pytest.param(0.5, id="0.5 req/s"), pytest.param(20.0, id="20 req/s")])
def test_a_poisson_log_stamped_to_the_second_with_a_numeric_value_is_counted(tmp_path, header, row, rate):
    """A real log's per-second counts vary: Poisson arrivals stamped to the second, `value` the tokens of each
    request. At 20 req/s every second holds some, evenly spaced, but never the same number each; at 0.5 req/s
    the empty seconds leave the times uneven too."""
    rng = _rng(11)
    per = rng.poisson(rate, SECONDS)
    per[0] = max(per[0], 1)
    path = _log(tmp_path, header, (row(rng, s, j) for s in range(SECONDS) for j in range(per[s])))
    y = load_demand(path, "requests", step="1min")
    whole = per[: 60 * (SECONDS // 60)].reshape(-1, 60).sum(axis=1) / 60
    assert y.notna().sum() >= 50, y
    assert np.allclose(y.dropna(), whole[:y.notna().sum()]), (y.dropna().head(), whole[:3])


def _two_series(header, row, count=2000):
    return header, [row(2 * i + j, START + 60 * i, inst, j) for i in range(count)
                    for j, inst in enumerate(("a:9400", "b:9400"))]


@pytest.mark.parametrize("header, row", [
    pytest.param(",timestamp,value,instance", lambda n, t, inst, j: f"{n},{t},{100 + n % 7},{inst}",
                 id="a row index (pandas' to_csv)"),
    pytest.param("timestamp,time,value,instance", lambda n, t, inst, j: f"{t},{np.datetime64(t, 's')}Z,"
                 f"{100 + n % 7},{inst}", id="an ISO time beside the epoch one"),
    pytest.param("timestamp,value,instance,gpu_util", lambda n, t, inst, j: f"{t},{100 + n % 7},{inst},"
                 f"{n * 0.37:.2f}", id="a second metric"),
    pytest.param("timestamp,value,instance,gpu_util", lambda n, t, inst, j: f"{t},{100 + n % 7},{inst},"
                 f"{(n * 37) % 101}", id="a whole-number gpu_util"),   # counted before (a20)
    pytest.param("timestamp,value,instance,up", lambda n, t, inst, j: f"{t},{100 + n % 7},{inst},"
                 f"{int(n % 97 != 0)}", id="a 0/1 up column"),   # counted before (a20)
    pytest.param("timestamp,value,instance,pod", lambda n, t, inst, j: f"{t},{100 + n % 7},{inst},"
                 f"{inst}-{'x' if n < 2000 else 'y'}", id="a pod label changed once"),   # counted before (a20)
])
def test_two_series_exported_together_are_refused_whatever_their_other_columns(tmp_path, header, row):
    """Two series every 60 s: each time given twice, `value` numbers. Their other columns do not matter; before, a
    whole-number `gpu_util`, a 0/1 `up` or a `pod` changed once made the label sets other than two and the export
    was counted as a log (0.033 req/s)."""
    header, rows = _two_series(header, row)
    _refused(_log(tmp_path, header, rows), 4000, 2000, 2)


def test_a_trace_every_500_ms_with_an_instance_label_is_refused(tmp_path):
    """A demand trace every 500 ms with its instance: each time once, evenly spaced. Counted before (2 req/s: a
    column besides timestamp and value made rows under 1 s apart arrivals); refused as the bare one is."""
    path = _log(tmp_path, "timestamp,value,instance", (f"{START + 0.5 * i:.3f},{5000 + i % 7},a:9400"
                                                       for i in range(7200)))
    _refused(path, 7200, 7200, 1)
