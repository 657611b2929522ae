"""MIG partitions in the fleet spec (`mig:` on a node group, balancer.mig): a partition that fits the model is kept
per node; one that does not is an InputError naming the file, the field, the value and what is allowed (exit 2)."""

from __future__ import annotations

import pytest
import yaml

from balancer import cli, fleet
from balancer.errors import InputError


def _doc(model: str = "A100-SXM4-80GB", **extra) -> dict:
    groups = [{"namePrefix": "mig-", "count": 2, "gpuModel": model, "gpusPerNode": 4, **extra},
              {"namePrefix": "whole-", "count": 1, "gpuModel": "H100-SXM", "gpusPerNode": 8}]
    return {"apiVersion": "gputide/v1alpha1", "kind": "FleetSpec", "metadata": {"name": "t"},
            "spec": {"nodeGroups": groups}}


@pytest.mark.parametrize(("model", "partition"), [
    ("A100-SXM4-80GB", ["3g.40gb", "2g.20gb", "2g.20gb"]),
    ("A100-SXM4-80GB", ["1g.20gb"] * 4),
    ("A100-PCIE-40GB", ["4g.20gb", "3g.20gb"]),
    ("H100-SXM", ["1g.10gb+me"] + ["1g.10gb"] * 6),
    ("H200-SXM", ["7g.141gb"]),
    ("G2", ["3g.40gb", "3g.40gb"]),
], ids=["the task's 3g+2g+2g on an A100 80GB", "four 1g.20gb take all 8 memory slices with 4 compute",
        "an A100 40GB's profiles are its own", "seven 1g instances, one with the media engines",
        "an H200 whole as one 7g instance", "an Alibaba code is checked as the model it maps to"])
def test_a_partition_that_fits_the_model_is_kept_for_every_node_of_its_group(model, partition):
    built = fleet.from_dict(_doc(model, mig=partition), "f.yaml")
    assert dict(built.mig) == {"mig-00": tuple(partition), "mig-01": tuple(partition)}


def test_a_fleet_without_mig_has_none():
    assert dict(fleet.from_dict(_doc(), "f.yaml").mig) == {} == dict(fleet.demo_fleet().mig)


@pytest.mark.parametrize(("model", "partition", "field", "allowed"), [
    ("A100-SXM4-80GB", ["3g.40gb", "5g.50gb"], "mig[1]", "a MIG profile of A100-SXM4-80GB: 1g.10gb"),
    ("A100-PCIE-40GB", ["3g.40gb"], "mig[0]", "a MIG profile of A100-PCIE-40GB: 1g.5gb"),
    ("A100-SXM4-80GB", ["4g.40gb", "4g.40gb"], "mig", "at most 7 compute slices"),
    ("A100-SXM4-80GB", ["3g.40gb", "3g.40gb", "1g.10gb"], "mig", "these take 7 and 9"),
    ("H100-SXM", ["1g.10gb+me", "1g.10gb+me"], "mig", "at most one instance with media extensions"),
    ("L40S", ["1g.10gb"], "mig", "L40S has no MIG"),
    ("H100-SXM", "3g.40gb", "mig", "a non-empty list of GPU instance profiles"),
    ("H100-SXM", [], "mig", "a non-empty list of GPU instance profiles"),
    ("H100-SXM", [3], "mig[0]", "a MIG profile of H100-SXM"),
], ids=["a profile the model does not offer", "another model's profile", "more compute slices than 7",
        "compute fits but memory does not (3g+3g take all 8 memory slices)", "two instances with the media engines",
        "a model without MIG", "a string, not a list", "an empty list", "a number, not a profile"])
def test_a_partition_that_does_not_fit_names_file_field_value_and_what_is_allowed(model, partition, field, allowed):
    with pytest.raises(InputError) as err:
        fleet.from_dict(_doc(model, mig=partition), "f.yaml")
    assert err.value.field == f"spec.nodeGroups[0].{field}"
    assert allowed in err.value.allowed
    assert str(err.value).startswith("f.yaml: ")


def test_gputide_check_exits_2_on_a_bad_partition_and_says_why(tmp_path, capsys):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(_doc(mig=["7g.80gb", "1g.10gb"])))
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "spec.nodeGroups[0].mig" in err and "7g.80gb" in err and "at most 7 compute slices" in err
