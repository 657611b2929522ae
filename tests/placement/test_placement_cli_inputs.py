"""`gputide place` on bad input files: one line naming the file, the field, the value and what is allowed; exit 2."""

from __future__ import annotations

import pytest

from balancer.cli import main

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,8,V100M16\nn1,32000,262144,2,T4\nn2,32000,262144,0,\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def _place(tmp_path, pods: str, *extra: str) -> int:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS + pods)
    return main(["place", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                 "--policy", "gputide", "--seeds", "1", *extra])


@pytest.mark.parametrize(
    ("row", "shown"),
    [("p0,1000,1000,1,-500,\n", "invalid value -500;"), ("p0,1000,1000,1.5,500,\n", "invalid value 1.5;"),
     ("p0,-1,1000,1,500,\n", "invalid value -1;")],
    ids=["negative gpu_milli", "fractional num_gpu", "negative cpu_milli"],
)
def test_a_numeric_cell_out_of_range_is_shown_as_written(tmp_path, capsys, row, shown):
    """The value is the cell as the file has it, not numpy's repr of it (`np.int64(-500)`)."""
    assert _place(tmp_path, row) == 2
    err = capsys.readouterr().err
    assert shown in err and "np." not in err and "row 2" in err and "pods.csv" in err
    assert "Traceback" not in err
