"""`gputide place` reads names as written: sn, name, model and gpu_spec are text, never numbers or NA.

Before, pandas inferred the columns: a node model `4090` and a pod gpu_spec `4090` in a column with an empty cell
read as 4090.0, so 2 of 3 pods "fit no node" and the replay went on with wrong results (exit 0); a node named `NA`
or `null` read as missing and was refused as `invalid value ''`."""

from __future__ import annotations

import json

import pytest

from balancer.cli import main
from balancer.plan.placement.replay import load_nodes, load_pods

PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def _place(tmp_path, nodes: str, pods: str) -> tuple[int, str]:
    (tmp_path / "nodes.csv").write_text(nodes)
    (tmp_path / "pods.csv").write_text(pods)
    out = tmp_path / "out.json"
    code = main(["place", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                 "--policy", "bestfit", "--seeds", "1", "--json", str(out)])
    return code, out.read_text() if out.exists() else ""


def test_numeric_looking_model_names_match_as_written(tmp_path, capsys):
    nodes = "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,8,4090\nn2,64000,262144,8,3090\n"
    pods = PODS + "p1,1000,1000,1,500,4090\np2,1000,1000,1,500,\np3,1000,1000,1,1000,4090\n"
    code, out = _place(tmp_path, nodes, pods)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "4090.0" not in err and "fit no node" not in err and "no node" not in err, err
    assert json.loads(out)["policy"] == "bestfit"
    assert [p.allowed_models for p in load_pods(tmp_path / "pods.csv")] == [("4090",), None, ("4090",)]
    assert sorted(load_nodes(tmp_path / "nodes.csv").models) == ["3090", "4090"]


@pytest.mark.parametrize("sn", ["NA", "null", "NaN", "None"])
def test_a_node_named_like_a_missing_value_is_a_name(tmp_path, capsys, sn):
    nodes = f"sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,T4\n{sn},64000,262144,2,T4\n"
    code, _ = _place(tmp_path, nodes, PODS + "p1,1000,1000,1,500,T4\n")
    assert code == 0, capsys.readouterr().err
    assert load_nodes(tmp_path / "nodes.csv").names == ("n0", sn)


def test_a_pod_named_na_keeps_its_name(tmp_path):
    (tmp_path / "pods.csv").write_text(PODS + "NA,1000,1000,1,500,\n")
    assert [p.name for p in load_pods(tmp_path / "pods.csv")] == ["NA"]
