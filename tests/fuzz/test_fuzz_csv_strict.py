"""CSV rows the readers took without a word though they do not say one thing: a sample with no time (read as NaT,
which made a trace's step 1.2e-06 s), one time given twice (averaged into a demand nobody saw), a calibration
history out of time order (the settle filter measures time since the last replica change row by row), a node list
with a nameless or repeated node, a pod asking for a share of zero GPUs. Each is an InputError naming the file,
the column, the value and what is allowed."""

from __future__ import annotations

import pytest
from fuzz_helpers import assert_names_everything

from balancer.cmd.calibrate import from_csv
from balancer.errors import InputError
from balancer.forecast.traces import load_demand
from balancer.plan.placement import replay

TRACE = "timestamp,value\n"
CALIB = "timestamp,demand_rps,replicas,p99_s\n"
NODES = "sn,cpu_milli,memory_mib,gpu,model\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"


def _trace(path):
    return load_demand(path, "csv")


def _requests(path):
    return load_demand(path, "requests")


@pytest.mark.parametrize("reader, text, field", [
    pytest.param(_trace, TRACE + "0,1\n,2\n1200,3\n", "timestamp", id="trace: a row without a time"),
    pytest.param(_trace, TRACE + "2024-01-01T00:00:00Z,1\nNaT,2\n2024-01-01T00:20:00Z,3\n", "timestamp",
                 id="trace: NaT for a time"),
    pytest.param(_requests, "timestamp\n2024-01-01T00:00:00Z\n\n2024-01-01T00:20:00Z\nnan\n", "timestamp",
                 id="requests: a request at no time"),
    pytest.param(_trace, TRACE + "0,1\n600,2\n600,50\n1200,3\n", "timestamp", id="trace: one time given twice"),
    pytest.param(_trace, TRACE + "0,1\n600,1e308\n1200,1e308\n", "value", id="trace: demand whose sum is inf"),
    pytest.param(from_csv, CALIB, "rows", id="calibration: a header and no sample"),
    pytest.param(from_csv, CALIB + "0,1,1,0.2\n,1,1,0.2\n", "timestamp", id="calibration: a sample at no time"),
    pytest.param(from_csv, CALIB + "0,1,1,0.2\n0,2,3,0.4\n", "timestamp", id="calibration: one time given twice"),
    pytest.param(replay.load_nodes, NODES + "a,64000,1024,1,G2\na,64000,1024,1,G2\n", "sn",
                 id="node list: one node twice"),
    pytest.param(replay.load_nodes, NODES + ",64000,1024,1,G2\n", "sn", id="node list: a node without a name"),
    pytest.param(replay.load_pods, PODS + "p,1,1,0,500\n", "gpu_milli", id="pod list: half of no GPU"),
])
def test_ambiguous_rows_are_input_errors(tmp_path, reader, text, field):
    path = tmp_path / "in.csv"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        reader(str(path))
    assert_names_everything(info.value, file=str(path), field=field)
    assert field == "rows" or "row " in info.value.detail   # the row to look at


def test_a_calibration_history_out_of_order_is_read_in_time_order(tmp_path):
    path = tmp_path / "calib.csv"
    path.write_text(CALIB + "120,3,1,0.3\n0,1,1,0.1\n60,2,2,0.2\n")
    frame = from_csv(str(path))
    assert frame["t"].tolist() == [0.0, 60.0, 120.0]
    assert frame["demand"].tolist() == [1.0, 2.0, 3.0] and frame["replicas"].tolist() == [1.0, 2.0, 1.0]


@pytest.mark.parametrize("reader, header", [
    pytest.param(_trace, "timestamp,value,value", id="trace: value twice"),
    pytest.param(_trace, "Timestamp,timestamp,value", id="trace: timestamp twice in two cases"),
    pytest.param(_requests, "timestamp,TIMESTAMP", id="requests: timestamp twice"),
    pytest.param(from_csv, "timestamp,demand_rps,replicas,p99_s,replicas", id="calibration: replicas twice"),
    pytest.param(replay.load_nodes, "sn,cpu_milli,memory_mib,gpu,gpu,model", id="node list: gpu twice"),
    pytest.param(replay.load_pods, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,num_gpu", id="pod list: num_gpu twice"),
])
def test_a_header_naming_a_column_twice_is_an_input_error(tmp_path, reader, header):
    """pandas renames the second `value` to `value.1` and reads the first, whichever the writer meant."""
    path = tmp_path / "in.csv"
    width = header.count(",") + 1
    path.write_text(header + "\n" + "".join(",".join([str(600 * i)] + ["1"] * (width - 1)) + "\n" for i in range(3)))
    with pytest.raises(InputError) as info:
        reader(str(path))
    assert_names_everything(info.value, file=str(path), field="header")


def test_a_column_name_past_the_csv_module_field_limit_is_read_as_pandas_reads_it(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("timestamp,value," + "x" * 200_000 + "\n" + "".join(f"{600 * i},1,2\n" for i in range(3)))
    assert load_demand(str(path)).tolist() == [1.0, 1.0, 1.0]
