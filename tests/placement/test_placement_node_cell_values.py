"""A bad numeric cell of the node list is shown as `servegen.cell` shows a trace's: the value pandas read, as a
plain Python value (-1, 1.5, 'abc', True), never numpy's repr (`np.int64(-1)`). `replay._ints` converted the cell
inline, a copy of that helper; the pod list's side is pinned in test_placement_cli_inputs.py."""

from __future__ import annotations

import pytest

from balancer.cli import main

PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1000,1,500\n"


@pytest.mark.parametrize(("cells", "field", "shown"), [
    (("-1", "8"), "gpu", "-1"),
    (("1.5", "8"), "gpu", "1.5"),
    (("abc", "8"), "gpu", "'abc'"),
    (("true", "false"), "gpu", "True"),
    (("65", "8"), "gpu", "65"),
], ids=["negative", "fractional", "not a number", "true/false", "over 64"])
def test_a_bad_node_cell_is_shown_as_a_plain_value(tmp_path, capsys, cells, field, shown):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},32000,262144,{gpu},T4\n" for i, gpu in enumerate(cells)))
    (tmp_path / "pods.csv").write_text(PODS)
    code = main(["place", "--nodes", str(nodes), "--pods", str(tmp_path / "pods.csv"), "--policy", "bestfit",
                 "--seeds", "1"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{nodes}: field '{field}': invalid value {shown}; allowed: " in err and "np." not in err, err
    assert err.rstrip().endswith("(row 2)") and len(err.strip().splitlines()) == 1, err
