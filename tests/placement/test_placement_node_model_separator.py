"""A node model holding `|` exits 2 from `gputide place`, naming the file, the row, the field and the value.

Before (audit a1): a node list row of model `T4|A10` loaded, although `|` separates the models a pod's gpu_spec
allows: `T4|A10` in a gpu_spec means T4 or A10, so no pod could ever ask for that node's GPUs by model.
"""

from __future__ import annotations

import pytest

from balancer.cli import main
from balancer.errors import InputError
from balancer.plan.placement.replay import load_nodes

PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,1000,1024,1,500,\nq,1000,1024,1,1000,T4|A10\n"


def test_a_node_model_with_the_gpu_spec_separator_exits_2(tmp_path, capsys):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,V100M16\nn1,64000,262144,8,T4|A10\n")
    (tmp_path / "pods.csv").write_text(PODS)
    code = main(["place", "--nodes", str(nodes), "--pods", str(tmp_path / "pods.csv"), "--policy", "bestfit",
                 "--seeds", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    (line,) = (text for text in err.splitlines() if text.strip())
    assert line.startswith(f"gputide: error: {nodes}: field 'model': invalid value 'T4|A10'; allowed: "), line
    assert "'|' separates the models a pod's gpu_spec allows" in line and line.endswith("(row 3)"), line


def test_only_a_node_model_holding_the_separator_is_refused(tmp_path):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,A10\nn1,32000,1024,0,\n")
    assert load_nodes(nodes).names == ("n0", "n1")
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8, A10 | T4 \n")
    with pytest.raises(InputError, match="row 2"):
        load_nodes(nodes)
