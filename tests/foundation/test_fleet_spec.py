"""Fleet specs: valid documents build the right topology; bad ones name file, field, value and what is allowed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from balancer import fleet
from balancer.errors import InputError

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "alibaba-gpu-v2023"


def _doc(**group_overrides):
    group = {"namePrefix": "n-", "count": 2, "gpuModel": "H100-SXM", "gpusPerNode": 8, "nvlinkDomainSize": 4}
    group.update(group_overrides)
    return {"apiVersion": "gputide/v1alpha1", "kind": "FleetSpec", "metadata": {"name": "t"},
            "spec": {"nodeGroups": [group]}}


def test_demo_fleet_is_32_nodes_of_8_gpus_with_mixed_models_and_nvlink_islands():
    f = fleet.demo_fleet()
    assert len(f.nodes) == 32 and f.n_gpus == 256
    assert {n.gpu_model for n in f.nodes} == {"H100-SXM", "A100-SXM4-80GB", "L40S", "A100-PCIE-40GB"}
    domains = {g.nvlink_domain for g in f.gpus if g.model == "H100-SXM"}
    assert len(domains) == 8  # one 8-GPU island per H100 node
    assert all(g.nvlink_domain == -1 for g in f.gpus if g.model == "L40S")
    assert len({g.uuid for g in f.gpus}) == 256


def test_uuids_are_stable_across_processes():
    code = "from balancer import fleet; print(fleet.demo_fleet().gpus[7].uuid)"
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    assert outs == {fleet.demo_fleet().gpus[7].uuid + "\n"}


def test_nvlink_domains_split_a_node_into_islands():
    f = fleet.from_dict(_doc(count=1, nvlinkDomainSize=4))
    assert [g.nvlink_domain for g in f.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.parametrize(
    ("overrides", "field", "allowed_fragment"),
    [
        ({"gpuModel": "B9000"}, "spec.nodeGroups[0].gpuModel", "H100-SXM"),
        ({"count": 0}, "spec.nodeGroups[0].count", "from 1 to 100000"),
        ({"count": "two"}, "spec.nodeGroups[0].count", "integer"),
        ({"nvlinkDomainSize": 3}, "spec.nodeGroups[0].nvlinkDomainSize", "divisor"),
        ({"gpuModel": "L40S"}, "spec.nodeGroups[0].nvlinkDomainSize", "no NVLink"),
        ({"cooling": "water"}, "spec.nodeGroups[0].cooling", "air | liquid"),
        ({"inletC": 80}, "spec.nodeGroups[0].inletC", "5 to 50"),
        ({"colour": "red"}, "spec.nodeGroups[0].colour", "one of the fields"),
    ],
    ids=["unknown-model", "zero-count", "count-not-int", "nvlink-not-divisor", "nvlink-on-pcie-board",
         "unknown-cooling", "inlet-too-hot", "unknown-field"],
)
def test_invalid_group_names_field_value_and_allowed(tmp_path, overrides, field, allowed_fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_doc(**overrides)))
    with pytest.raises(InputError) as err:
        fleet.load(path)
    assert err.value.field == field
    assert str(path) in str(err.value)
    assert allowed_fragment in err.value.allowed


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("apiVersion: v0\nkind: FleetSpec\nspec: {}\n", "apiVersion"),
        ("apiVersion: gputide/v1alpha1\nkind: Fleet\nspec: {}\n", "kind"),
        ("apiVersion: gputide/v1alpha1\nkind: FleetSpec\nspec: {nodeGroups: []}\n", "spec.nodeGroups"),
        ("[unclosed", "(document)"),
        ("- a list\n", "(document)"),
    ],
    ids=["wrong-version", "wrong-kind", "no-groups", "bad-yaml", "not-a-mapping"],
)
def test_invalid_documents(tmp_path, text, field):
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        fleet.load(path)
    assert err.value.field == field


def test_cli_exits_2_on_a_bad_fleet_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_doc(gpuModel="B9000")))
    code = f"from balancer import fleet; fleet.load({str(path)!r})"
    proc = subprocess.run([sys.executable, "-c", "import sys\nfrom balancer.cli import main\n"
                           "from balancer.errors import InputError\n"
                           f"try:\n    {code}\nexcept InputError as e:\n    print(e, file=sys.stderr); sys.exit(2)"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "gpuModel" in proc.stderr and "B9000" in proc.stderr


def test_scaled_fleet_keeps_the_model_mix():
    f = fleet.scaled_fleet(1024)
    assert 900 <= f.n_gpus <= 1100
    assert {n.gpu_model for n in f.nodes} == {n.gpu_model for n in fleet.demo_fleet().nodes}


def test_alibaba_node_list_maps_codes_to_catalogue(tmp_path):
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                    "openb-node-0000,64000,262144,2,P100\n"
                    "openb-node-0001,96000,393216,8,G2\n"
                    "openb-node-0002,96000,393216,0,\n")
    f = fleet.alibaba_fleet(path)
    assert [n.gpu_model for n in f.nodes][:2] == ["P100-PCIE-16GB", "A100-SXM4-80GB"]
    assert f.n_gpus == 10
    assert f.nodes[1].nvlink_domain_size == 8 and f.nodes[1].pool == "G2"


def test_alibaba_bad_row_is_reported_with_its_row(tmp_path):
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nx,64000,262144,two,P100\n")
    with pytest.raises(InputError) as err:
        fleet.alibaba_fleet(path)
    assert err.value.field == "row 2"


@pytest.mark.skipif(not SHARED.exists(), reason="shared Alibaba trace not present")
def test_the_real_alibaba_gpu_node_list_loads():
    f = fleet.alibaba_fleet(SHARED / "openb_node_list_gpu_node.csv")
    assert len(f.nodes) == 1213 and f.n_gpus == 6212
