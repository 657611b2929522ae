"""Which files with repeated times `--format requests` counts as a log and which it refuses as k series exported
together (audit a10 of 58985940).

A `value` column at evenly spaced times, each given k times, is k series when the k rows at each time carry the same
k label sets (`_series_labels`); the checks that keep a log stamped to the second a log had no test: replacing them by
`True`, or dropping the equal-counts check, passed every test. Each counted case here is a log that one check alone
lets through; the refused ones are exports with a column that no label is (a row index, an ISO time), which made them
pass as logs before.
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


def test_one_model_stamped_to_the_second_is_counted(tmp_path):
    """5 req/s, stamped to the second, one model: each time 5 rows that no label tells apart (one label set)."""
    rows = (f"{START + s},llama-3-8b,{100 + (5 * s + j) % 50}" for s in range(SECONDS) for j in range(5))
    _counted(_log(tmp_path, "timestamp,model,value", rows), 5.0)


def test_a_request_id_on_each_row_is_counted(tmp_path):
    """5 req/s stamped to the second, a request id on each row: a column with a value for each row is no label (as a
    row index is not), which leaves none to tell the 5 rows at a time apart."""
    rows = (f"{START + s},req-{5 * s + j:08d},{100 + j}" for s in range(SECONDS) for j in range(5))
    _counted(_log(tmp_path, "timestamp,request_id,value", rows), 5.0)


def test_two_models_drawn_at_random_are_counted(tmp_path):
    """2 req/s stamped to the second, each request for one of two models at random: two label sets, as two series
    have, but a second with both requests for one model repeats one."""
    models = np.random.default_rng(5).choice(["llama-3-8b", "mistral-7b"], size=(SECONDS, 2))
    rows = (f"{START + s},{models[s, j]},{100 + j}" for s in range(SECONDS) for j in range(2))
    _counted(_log(tmp_path, "timestamp,model,value", rows), 2.0)


def test_a_client_of_many_is_counted(tmp_path):
    """3 req/s stamped to the second, one for each of 3 models, each from one of 40 clients: the models are 3 label
    sets at every time, but a client column of 40 values, fewer than the times, is no label k series carry."""
    clients = np.random.default_rng(6).integers(0, 40, size=(SECONDS, 3))
    rows = (f"{START + s},{m},client-{clients[s, j]},{100 + j}" for s in range(SECONDS)
            for j, m in enumerate(("llama-3-8b", "mistral-7b", "qwen-7b")))
    _counted(_log(tmp_path, "timestamp,model,client,value", rows), 3.0)


def test_unequal_counts_per_second_are_counted(tmp_path):
    """A log stamped to the second, one to three requests a second, one model: its first second holds one, and
    taken for one row a time (its distinct times a second apart), it would be a demand trace."""
    per = np.random.default_rng(7).integers(1, 4, SECONDS)
    per[0] = 1
    rows = (f"{START + s},llama-3-8b,{100 + j}" for s in range(SECONDS) for j in range(per[s]))
    y = load_demand(_log(tmp_path, "timestamp,model,value", rows), "requests", step="1min")
    assert y.notna().sum() >= 50, y
    whole = per[: 60 * (SECONDS // 60)].reshape(-1, 60).sum(axis=1) / 60
    assert np.allclose(y.dropna(), whole[:y.notna().sum()]), (y.dropna().head(), whole[:3])


@pytest.mark.parametrize("header, row, labels", [
    pytest.param(",timestamp,value,instance", lambda n, t, inst: f"{n},{t},{100 + n % 7},{inst}", "instance",
                 id="a row index (pandas' to_csv)"),
    pytest.param("timestamp,time,value,instance", lambda n, t, inst: f"{t},{np.datetime64(t, 's')}Z,{100 + n % 7},"
                 f"{inst}", "instance", id="an ISO time beside the epoch one"),
    pytest.param("timestamp,value,instance,gpu_util", lambda n, t, inst: f"{t},{100 + n % 7},{inst},{n * 0.37:.2f}",
                 "instance", id="a second metric"),
])
def test_an_export_with_a_column_no_label_is_refused(tmp_path, header, row, labels):
    """Two series every 60 s with a column holding a value for each time or row: as a label, its values never
    recurred at another time, and the export was counted (0.033 req/s)."""
    rows = (row(2 * i + j, START + 60 * i, inst) for i in range(2000) for j, inst in enumerate(("a:9400", "b:9400")))
    path = _log(tmp_path, header, rows)
    with pytest.raises(InputError) as info:
        load_demand(path, "requests", step="1min")
    message = str(info.value)
    assert message.startswith(f"{path}: field 'value': invalid value 'a column of 4000 numbers'"), message
    assert f"each of its 2000 times given 2 times, once for each of 2 label sets ({labels}): 2 series" in message
