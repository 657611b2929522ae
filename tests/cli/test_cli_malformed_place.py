"""`gputide place` refuses pod lists the FGD protocol cannot measure, exit 2 naming the file, field and value.

Before, a gpu_spec of `|` read as 'any model', one of `???` as a model no node has (the pod failed everywhere),
a pod list whose GPU pods all name models absent from the node list, or one with no GPU pod at all, replayed
and reported 100 % (or 0 %) unallocated GPUs: a result about the files, not the policy.
"""

from __future__ import annotations

import pytest

from balancer.cli import main

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,1024,2,T4\nn1,64000,1024,8,V100M16\n"
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


@pytest.mark.parametrize("rows, field, value, allowed", [
    pytest.param("p,1,1,1,500,???\nq,1,1,1,500,\n", "gpu_spec", "'???'", "GPU model names joined by '|'",
                 id="a spec that is no model name"),
    pytest.param("p,1,1,1,500,T4\nq,1,1,1,500,|\n", "gpu_spec", "'|'", "empty (any model)",
                 id="a spec of separators only"),
    pytest.param("p,1,1,1,500,A100\nq,1,1,1,1000,H100|A100\n", "gpu_spec", "'A100'", "T4, V100M16",
                 id="every GPU pod limited to models no node has"),
    pytest.param("p,1000,1,0,0,\nq,2000,1,0,0,\n", "num_gpu", "0", "at least one pod with num_gpu > 0",
                 id="no pod asks for a GPU"),
])
def test_a_pod_list_the_protocol_cannot_measure_exits_2(tmp_path, capsys, rows, field, value, allowed):
    (tmp_path / "nodes.csv").write_text(NODES)
    pods = tmp_path / "pods.csv"
    pods.write_text(HEADER + rows)
    out = tmp_path / "out.json"
    code = main(["place", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(pods), "--policy", "bestfit",
                 "--seeds", "1", "--json", str(out)])
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, captured.err
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith(f"gputide: error: {pods}: field '{field}': invalid value {value}; allowed: "), lines
    assert allowed in lines[0], lines
    assert not out.exists() and "unallocated" not in captured.out
