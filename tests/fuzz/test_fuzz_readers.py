"""Bad-input properties of the CSV readers: the Alibaba node and pod lists (balancer.plan.placement.replay) and
the demand traces (balancer.forecast.traces): anything that is not a valid file is an InputError naming the file,
the column, the value and what is allowed; valid files keep every value they hold."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pandas as pd
import pytest
from fuzz_helpers import assert_names_everything
from fuzzing import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from balancer.errors import InputError
from balancer.forecast.traces import load_demand
from balancer.plan.placement import replay

SETTINGS = settings(max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow])
NUMBERISH = st.one_of(st.sampled_from(["", "0", "1", "8", "-1", "1.5", "inf", "-inf", "nan", "1e30", "9" * 25, "x",
                                       "1000", "2000", "500"]),
                      st.integers(-10, 2000).map(str), st.text(alphabet="0123456789-.e", max_size=5))


def _write(path, header, rows) -> str:
    out = io.StringIO()
    csv.writer(out).writerows([header, *rows])
    path.write_text(out.getvalue())
    return str(path)


@SETTINGS
@given(st.lists(st.tuples(st.text(alphabet="abc", min_size=1, max_size=3), NUMBERISH, NUMBERISH, NUMBERISH,
                          st.sampled_from(["G2", "T4", "", "V100M16"])), max_size=5))
def test_any_node_list_is_a_cluster_or_an_input_error(tmp_path_factory, rows):
    path = _write(tmp_path_factory.mktemp("n") / "nodes.csv", replay.NODE_COLUMNS, rows)
    try:
        state = replay.load_nodes(path)
    except InputError as exc:
        assert_names_everything(exc, file=path)
        return
    assert state.n_nodes == len(rows)
    assert (state.cpu_total >= 0).all() and (state.mem_total >= 0).all()  # never a wrapped-around int64
    assert state.total_gpu_milli == 1000 * sum(int(float(r[3])) for r in rows)


@SETTINGS
@given(st.lists(st.tuples(st.just("p"), NUMBERISH, NUMBERISH, NUMBERISH, NUMBERISH), max_size=5))
def test_any_pod_list_is_pods_or_an_input_error(tmp_path_factory, rows):
    path = _write(tmp_path_factory.mktemp("p") / "pods.csv", replay.POD_COLUMNS, rows)
    try:
        pods = replay.load_pods(path)
    except InputError as exc:
        assert_names_everything(exc, file=path)
        return
    assert len(pods) == len(rows)
    for p, r in zip(pods, rows, strict=True):
        assert p.cpu_milli == float(r[1]) and p.num_gpu == float(r[3]) and 0 <= p.gpu_milli <= 1000


@pytest.mark.parametrize("reader, text, field", [
    pytest.param(replay.load_nodes, "sn,cpu_milli,memory_mib,gpu,model\n", "rows", id="node list: header only"),
    pytest.param(replay.load_nodes, "sn,cpu_milli,memory_mib,gpu,model\na,inf,1,1,G2\n", "cpu_milli",
                 id="node list: infinite CPU"),
    pytest.param(replay.load_nodes, "sn,cpu_milli,memory_mib,gpu,model\na,1e30,1,1,G2\n", "cpu_milli",
                 id="node list: CPU beyond int64"),
    pytest.param(replay.load_nodes, "sn,cpu_milli,memory_mib,gpu,model\na,1,1,2,\n", "model",
                 id="node list: GPUs without a model"),
    pytest.param(replay.load_pods, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,500\n", "gpu_milli",
                 id="pod list: a fraction of two GPUs"),
    pytest.param(replay.load_pods, "name,cpu_milli\np,1\n", "columns", id="pod list: missing columns"),
])
def test_named_bad_alibaba_lists(tmp_path, reader, text, field):
    path = tmp_path / "x.csv"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        reader(path)
    assert_names_everything(info.value, file=str(path), field=field)


def test_a_directory_is_not_a_node_list(tmp_path):
    with pytest.raises(InputError) as info:
        replay.load_nodes(tmp_path)
    assert_names_everything(info.value, file=str(tmp_path), field="path")


# ---- demand traces -----------------------------------------------------------------------------------------------
# Epochs within ~12 days, so the resampled series stays small; out-of-range epochs are FOUND_TRACE_BUGS below.
EPOCH = st.integers(1_700_000_000, 1_700_000_000 + 10**6)


@SETTINGS
@given(st.lists(st.tuples(EPOCH.map(str), NUMBERISH),
                min_size=0, max_size=6))
def test_any_demand_csv_is_a_series_or_an_input_error(tmp_path_factory, rows):
    path = _write(tmp_path_factory.mktemp("t") / "trace.csv", ["timestamp", "value"], rows)
    try:
        y = load_demand(path, "csv")
    except InputError as exc:
        assert_names_everything(exc, file=path)
        return
    v = y.to_numpy()
    assert len(v) >= 2 and not np.isinf(v).any() and (v[~np.isnan(v)] >= 0).all()
    assert isinstance(y.index, pd.DatetimeIndex) and str(y.index.tz) == "UTC"


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 2000), st.floats(0, 1e4)), min_size=2, max_size=20, unique_by=lambda r: r[0]))
def test_valid_demand_csv_keeps_every_value_at_its_own_step(tmp_path_factory, rows):
    rows = [(t * 60, v) for t, v in rows]  # timestamps on a 60 s grid, so step 60 s keeps each row in its own bin
    path = _write(tmp_path_factory.mktemp("t") / "trace.csv", ["timestamp", "value"], rows)
    y = load_demand(path, "csv", step="60s")
    got = {int(ts.timestamp()): v for ts, v in y.items() if not math.isnan(v)}
    assert got == pytest.approx({t: v for t, v in rows})


@pytest.mark.parametrize("fmt, text, field", [
    pytest.param("csv", "timestamp,value\n0,1\n600,-1\n", "value", id="negative demand"),
    pytest.param("csv", "timestamp,value\nnope,1\n0,1\n", "timestamp", id="a timestamp that is not one"),
    pytest.param("csv", "a,b\n1,2\n", "header", id="no timestamp/value header"),
    pytest.param("requests", "when\n0\n", "header", id="requests without a timestamp column"),
    pytest.param("csv", "timestamp,value\n0,1\n", "timestamp", id="a single row"),
])
def test_named_bad_traces(tmp_path, fmt, text, field):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_demand(path, fmt)
    assert_names_everything(info.value, file=str(path), field=field)


# Found by the properties above in balancer/forecast/traces.py and fixed there by its owner (commit c7aecbf).
FOUND_TRACE_BUGS = [
    pytest.param("csv", "timestamp,value\n0,1\n1e30,1\n", None, id="epoch beyond 2262: OutOfBoundsDatetime"),
    pytest.param("csv", "timestamp,value\n-1e12,1\n0,1\n", None, id="epoch before 1677: OutOfBoundsDatetime"),
    pytest.param("requests", "timestamp\n0\ninf\n", None, id="requests: infinite epoch: OutOfBoundsDatetime"),
    pytest.param("csv", "timestamp,value\n0,inf\n600,1\n", None, id="infinite demand accepted silently"),
    pytest.param("csv", "timestamp,value\n0,1\n6000000,1\n", "1ns", id="step of 1ns: ZeroDivisionError"),
    pytest.param("csv", b"\xff\xfe\x00timestamp,value\n", None, id="non-UTF-8 file: UnicodeDecodeError"),
]


@pytest.mark.parametrize("fmt, text, step", FOUND_TRACE_BUGS)
def test_trace_bugs_found_by_fuzzing_are_input_errors(tmp_path, fmt, text, step):
    path = tmp_path / "trace.csv"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(InputError) as info:
        load_demand(path, fmt, step=step)
    assert_names_everything(info.value, file=str(path))


@pytest.mark.parametrize("rows", [pytest.param("0,1\n1e30,2\n", id="huge window start"),
                                  pytest.param("0,1\ninf,2\n", id="infinite window start")])
def test_servegen_window_starts_out_of_range_are_input_errors(tmp_path, rows):
    (tmp_path / "client.csv").write_text(rows)
    with pytest.raises(InputError):
        load_demand(tmp_path, "servegen")


@SETTINGS
@given(st.lists(st.tuples(EPOCH.map(str), NUMBERISH, NUMBERISH, NUMBERISH), min_size=0, max_size=8))
def test_any_calibration_csv_is_samples_or_an_input_error_and_calibrates_without_crashing(tmp_path_factory, rows):
    from balancer.cmd.calibrate import CSV_COLUMNS, estimate, from_csv

    path = _write(tmp_path_factory.mktemp("c") / "samples.csv", list(CSV_COLUMNS), rows)
    try:
        frame = from_csv(path)
    except InputError as exc:
        assert_names_everything(exc, file=path)
        return
    values = frame[["demand", "replicas", "p99"]].to_numpy(float)
    assert not np.isinf(values).any() and (values[~np.isnan(values)] >= 0).all()
    result = estimate(frame, 0.5, 1.0, 0.0)   # zero replicas, gaps, too few samples: an answer, never a crash
    assert result.bound in ("measured", "lower", "none")
    assert result.rps_per_replica is None or (math.isfinite(result.rps_per_replica) and result.rps_per_replica > 0)
