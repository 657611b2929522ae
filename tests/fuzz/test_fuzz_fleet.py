"""Bad-input properties of the fleet spec (balancer.fleet.from_dict / load) and the Alibaba node list
(balancer.fleet.alibaba_fleet): InputErrors that name file, field, value and what is allowed; valid specs build
exactly the GPUs they describe."""

from __future__ import annotations

import csv
import io

import pytest
import yaml
from fuzz_helpers import JUNK, ODD_KEYS, assert_names_everything
from fuzzing import examples
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from balancer import catalog, fleet
from balancer.errors import InputError

SETTINGS = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
GOOD_GROUP = {"namePrefix": "n-", "count": 2, "gpuModel": "A100-SXM4-80GB", "gpusPerNode": 8, "nvlinkDomainSize": 8,
              "cpuMilli": 64000, "memoryMiB": 262144, "site": "s", "cooling": "air", "inletC": 25, "pool": "p"}


def _doc(groups) -> dict:
    return {"apiVersion": fleet.API_VERSION, "kind": "FleetSpec", "metadata": {"name": "fz"},
            "spec": {"nodeGroups": groups}}


@SETTINGS
@given(st.sampled_from(sorted(GOOD_GROUP)), JUNK)
@example(key="inletC", value=10**400)   # make fuzz: float() of a huge integer overflowed
def test_any_junk_group_field_is_an_input_error_or_a_valid_fleet(tmp_path_factory, key, value):
    path = tmp_path_factory.mktemp("fleet") / "bad.yaml"
    path.write_text(yaml.safe_dump(_doc([{**GOOD_GROUP, key: value}])))
    try:
        built = fleet.load(path)
    except InputError as exc:
        assert exc.file == str(path)
        assert exc.field.startswith("spec.nodeGroups[0].")
        assert_names_everything(exc, file=str(path))
        return
    # accepted: then the value was a legal one and the fleet says so
    assert built.n_gpus == len(built.nodes) * built.nodes[0].gpu_count
    assert all(n.inlet_c == n.inlet_c for n in built.nodes)  # never NaN


@SETTINGS
@given(ODD_KEYS.filter(lambda k: k not in GOOD_GROUP), JUNK)
def test_unknown_group_keys_of_any_type_are_named(key, value):
    with pytest.raises(InputError) as info:
        fleet.from_dict(_doc([{**GOOD_GROUP, key: value, "zzUnknown": 1}]), "f.yaml")
    assert "one of the fields" in info.value.allowed


@SETTINGS
@given(st.lists(st.fixed_dictionaries({
    "count": st.integers(1, 6), "gpusPerNode": st.sampled_from([0, 1, 2, 4, 8]),
    "gpuModel": st.sampled_from(sorted(catalog.CATALOGUE)), "inletC": st.floats(5, 50),
    "cooling": st.sampled_from(["air", "liquid"])}), min_size=1, max_size=4).filter(
        lambda groups: any(g["gpusPerNode"] for g in groups)))   # a fleet with no GPU at all is refused
def test_valid_specs_round_trip_and_build_every_gpu(groups):
    doc = _doc([{**g, "namePrefix": f"g{i}-"} for i, g in enumerate(groups)])
    built = fleet.from_dict(yaml.safe_load(yaml.safe_dump(doc)))
    assert built.n_gpus == sum(g["count"] * g["gpusPerNode"] for g in groups)
    assert len({g.uuid for g in built.gpus}) == built.n_gpus
    assert [n.gpu_model for n in built.nodes] == [g["gpuModel"] for g in groups for _ in range(g["count"])]


@pytest.mark.parametrize("doc, field", [
    pytest.param({**_doc([GOOD_GROUP]), "metadata": ["x"]}, "metadata", id="metadata is a list"),
    pytest.param({**_doc([GOOD_GROUP]), "metadata": "x"}, "metadata", id="metadata is a string"),
    pytest.param(_doc([]), "spec.nodeGroups", id="no node groups"),
    pytest.param(_doc(["x"]), "spec.nodeGroups[0]", id="a group is a string"),
    pytest.param(_doc([{**GOOD_GROUP, "count": 0}]), "spec.nodeGroups[0].count", id="zero nodes"),
    pytest.param(_doc([{**GOOD_GROUP, "gpuModel": "B9000"}]), "spec.nodeGroups[0].gpuModel", id="unknown model"),
    pytest.param(_doc([{**GOOD_GROUP, "inletC": float("nan")}]), "spec.nodeGroups[0].inletC", id="NaN inlet"),
    pytest.param(_doc([{**GOOD_GROUP, "nvlinkDomainSize": 3}]), "spec.nodeGroups[0].nvlinkDomainSize",
                 id="NVLink island does not divide the node"),
    pytest.param(_doc([GOOD_GROUP, GOOD_GROUP]), "spec.nodeGroups[1].namePrefix", id="duplicate node names"),
    pytest.param(_doc([{**GOOD_GROUP, 3: "x", "a": 1}]), "spec.nodeGroups[0].3", id="int and str unknown keys"),
])
def test_named_bad_fleet_specs(doc, field):
    with pytest.raises(InputError) as info:
        fleet.from_dict(doc, "named.yaml")
    assert_names_everything(info.value, file="named.yaml", field=field)


@SETTINGS
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_a_fleet_or_an_input_error(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("fleet") / "blob.yaml"
    path.write_bytes(blob)
    with pytest.raises(InputError):
        fleet.load(path)


# ---- Alibaba node list -------------------------------------------------------------------------------------------
NODE_HEADER = ["sn", "cpu_milli", "memory_mib", "gpu", "model"]
CELL = st.one_of(st.sampled_from(["", "0", "8", "-1", "99", "1.5", "inf", "nan", "1e30", "G2", "T4", "A100-SXM4-80GB",
                                  "x", " "]), st.text(alphabet="0123456789-.eE,\"x ", max_size=6))


def _csv(rows) -> str:
    out = io.StringIO()
    csv.writer(out).writerows([NODE_HEADER, *rows])
    return out.getvalue()


@SETTINGS
@given(st.lists(st.lists(CELL, min_size=3, max_size=6), min_size=0, max_size=4))
def test_any_node_list_is_a_fleet_or_an_input_error(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("nodes") / "nodes.csv"
    path.write_text(_csv(rows))
    try:
        built = fleet.alibaba_fleet(path)
    except InputError as exc:
        assert_names_everything(exc, file=str(path))
        return
    assert all(0 <= n.gpu_count <= 64 and n.cpu_milli >= 0 and n.memory_mib >= 0 and n.name for n in built.nodes)
    assert len({n.name for n in built.nodes}) == len(built.nodes)
    assert built.n_gpus == sum(n.gpu_count for n in built.nodes)


@pytest.mark.parametrize("text, field", [
    pytest.param("sn,cpu_milli,memory_mib,gpu,model\na,1,1,1\n", "row 2", id="short row"),
    pytest.param("sn,cpu_milli,memory_mib,gpu,model\na,1,1,-2,T4\n", "row 2", id="negative GPU count"),
    pytest.param("sn,cpu_milli,memory_mib,gpu,model\na,-5,1,1,T4\n", "row 2", id="negative CPU"),
    pytest.param("sn,cpu_milli,memory_mib,gpu,model\na,1,1,1,T4\na,1,1,1,T4\n", "row 3.sn", id="duplicate sn"),
    pytest.param("sn,cpu_milli,memory_mib,gpu,model\n,1,1,1,T4\n", "row 2.sn", id="empty sn"),
    pytest.param("sn,cpu_milli,memory_mib,gpu,model\na,1,1,1,B9000\n", "row 2.model", id="unknown model"),
    pytest.param("sn,gpu\na,1\n", "(header)", id="missing columns"),
    pytest.param("sn,cpu_milli,memory_mib,gpu,model\n", "(rows)", id="header only"),
])
def test_named_bad_node_lists(tmp_path, text, field):
    path = tmp_path / "nodes.csv"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        fleet.alibaba_fleet(path)
    assert_names_everything(info.value, file=str(path), field=field)


def test_a_binary_node_list_is_an_input_error(tmp_path):
    path = tmp_path / "nodes.csv"
    path.write_bytes(b"\xff\xfe\x00sn,gpu\n")
    with pytest.raises(InputError, match="UTF-8"):
        fleet.alibaba_fleet(path)
