"""`gputide place` reads its node and pod CSVs' rows with the trace reader's `read_rows` (one implementation).

Before, place had its own long-row finder: a row with a field past the csv module's limit (131072 characters) and
more fields than the header was a `_csv.Error` traceback (exit 1), and a trailing comma on some rows only was
pandas' 'C error' under field 'format', not the row. Now both exit 2 naming the file and the row, as the trace
readers do, the row shown shortened. The scan runs without the csv module's field limit: with it, a stray quote
with a large file behind it was blamed on 'a field over 131072 characters' at a later row (audit s32y1).
"""

from __future__ import annotations

import pytest

from balancer.cli import main

NODES_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
NODES = NODES_HEADER + "n0,32000,262144,8,V100M16\nn1,32000,262144,2,T4\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1000,1,500\np1,1000,1000,2,1000\n"


def _place(tmp_path, nodes: str, pods: str) -> int:
    (tmp_path / "nodes.csv").write_text(nodes)
    (tmp_path / "pods.csv").write_text(pods)
    return main(["place", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                 "--policy", "bestfit", "--seeds", "1"])


@pytest.mark.parametrize(("which", "nodes", "pods", "row", "shown"), [
    pytest.param("nodes.csv", NODES_HEADER + "n0,32000,262144,8,V100M16," + "x" * 200_000 + "\n", PODS, 2,
                 "... (200026 characters)'; allowed: at most 5 fields", id="a field over the csv limit, nodes"),
    pytest.param("pods.csv", NODES, PODS + "p2,1000,1000,1,500," + "y" * 200_000 + "\n", 4,
                 "... (200019 characters)'; allowed: at most 5 fields", id="a field over the csv limit, pods"),
    pytest.param("pods.csv", NODES, PODS + "p2,1000,1000,1,500,\n" + "n" * 200_000 + ",1000,1000,1,500\n", 4,
                 "'p2,1000,1000,1,500,'; allowed: as many fields on every row",
                 id="a trailing comma on one row before a long name"),
    pytest.param("nodes.csv", NODES + "n2,32000,262144,2,T4,\n", PODS, 4,
                 "a trailing comma on every row or on none", id="a trailing comma on some rows only"),
])
def test_a_row_the_reader_cannot_take_exits_2_naming_file_and_row(tmp_path, capsys, which, nodes, pods, row, shown):
    assert _place(tmp_path, nodes, pods) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err[:2000]
    assert lines[0].startswith(f"gputide: error: {tmp_path / which}: field 'row {row}': "), lines[0][:300]
    assert shown in lines[0] and len(lines[0]) < 2000, lines[0][:300]


def test_a_stray_quote_before_a_large_rest_is_pandas_message_not_a_later_row(tmp_path, capsys):
    """The rescan of a file pandas refused found the quote's field over the csv module's limit and blamed a late row."""
    pods = PODS + 'p2,"1000,1000,1,500\n' + "p3,1000,1000,1,500\n" * 9000
    assert _place(tmp_path, NODES, pods) == 2
    err = capsys.readouterr().err
    assert "field 'format'" in err and "EOF inside string" in err and "131072" not in err, err[:500]


def test_a_field_past_the_csv_limit_within_the_header_is_read_as_before(tmp_path, capsys):
    """Only a row longer than the header is scanned by the csv module: a long name is pandas' to read."""
    assert _place(tmp_path, NODES_HEADER + "n0,32000,262144,8,V100M16\n" + "n" * 200_000 + ",32000,262144,2,T4\n",
                  PODS) == 0
    assert "Traceback" not in capsys.readouterr().err
