"""The sim exporter on a fleet with MIG nodes (`mig:` in the fleet spec): per GPU instance SM activity with
dcgm-exporter's labels, as the NVML backend publishes it on a Hopper GPU in MIG mode, and no GPU-level utilisation
or SM activity (declared unsupported, no collect error) on those GPUs; whole GPUs unchanged."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from balancer import fleet
from balancer.sim import SimCluster
from exporters.backends.sim import DRIVER_VERSION, MIG_FIELDS, SimBackend
from exporters.collector import GpuCollector

PARTITION = ["3g.40gb", "2g.20gb", "2g.20gb"]
FLEET = {"apiVersion": "gputide/v1alpha1", "kind": "FleetSpec", "metadata": {"name": "mig"}, "spec": {"nodeGroups": [
    {"namePrefix": "whole-", "count": 1, "gpuModel": "H100-SXM", "gpusPerNode": 2},
    {"namePrefix": "mig-", "count": 2, "gpuModel": "A100-SXM4-80GB", "gpusPerNode": 2, "mig": PARTITION},
    {"namePrefix": "one-", "count": 1, "gpuModel": "H100-SXM", "gpusPerNode": 1, "mig": ["3g.40gb"]}]}}


def sim_with(activity: dict[int, float] | None = None) -> SimCluster:
    sim = SimCluster(fleet.from_dict(FLEET, "<mig>"), seed=0)
    for gpu, value in (activity or {}).items():
        sim.sm_active[gpu] = value
    return sim


def scrape(backend: SimBackend) -> CollectorRegistry:
    reg = CollectorRegistry()
    reg.register(GpuCollector(backend))
    return reg


def samples(reg: CollectorRegistry, name: str) -> list:
    return [s for m in reg.collect() for s in m.samples if s.name == name]


def instances(reg: CollectorRegistry) -> dict[tuple[str, str, str, str], float]:
    """(Hostname, gpu, GPU_I_ID, GPU_I_PROFILE) -> per-instance SM activity."""
    return {(s.labels["Hostname"], s.labels["gpu"], s.labels["GPU_I_ID"], s.labels["GPU_I_PROFILE"]): s.value
            for s in samples(reg, "DCGM_FI_PROF_SM_ACTIVE") if "GPU_I_ID" in s.labels}


@pytest.mark.parametrize(("activity", "expected"), [
    (0.0, (0.0, 0.0, 0.0)),
    (0.5, (1.0, 0.25, 0.0)),
    (0.9, (1.0, 1.0, 0.65)),
    (1.0, (1.0, 1.0, 1.0)),
], ids=["an idle GPU has idle instances", "half the GPU's work fills the 3g instance and a quarter of a 2g one",
        "90 % leaves the last 2g instance at 65 %", "a busy GPU has busy instances"])
def test_the_gpus_activity_fills_its_instances_in_order(activity, expected):
    reg = scrape(SimBackend(sim_with({2: activity})))
    got = instances(reg)
    assert tuple(got["mig-00", "0", gi, p] for gi, p in (("1", "3g.40gb"), ("2", "2g.20gb"), ("3", "2g.20gb"))) \
        == expected


def test_each_instance_carries_its_gpus_dcgm_labels_and_every_mig_gpu_has_its_instances():
    sim = sim_with()
    reg = scrape(SimBackend(sim))
    gpu = sim.fleet.gpus[3]
    labels = {"gpu": "1", "UUID": gpu.uuid, "pci_bus_id": gpu.pci_bus_id, "device": "nvidia1",
              "modelName": "NVIDIA A100-SXM4-80GB", "Hostname": "mig-00", "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION,
              "GPU_I_ID": "2", "GPU_I_PROFILE": "2g.20gb"}
    assert reg.get_sample_value("DCGM_FI_PROF_SM_ACTIVE", labels) is not None
    assert sorted({(h, g) for h, g, _, _ in instances(reg)}) == [
        ("mig-00", "0"), ("mig-00", "1"), ("mig-01", "0"), ("mig-01", "1"), ("one-00", "0")]
    assert len(instances(reg)) == 4 * 3 + 1


def test_a_partition_that_leaves_slices_free_spreads_the_work_over_the_slices_it_has():
    reg = scrape(SimBackend(sim_with({6: 0.4}), node="one-00"))
    assert instances(reg) == {("one-00", "0", "1", "3g.40gb"): 0.4}   # not 0.4 x 7 / 3 as if it had all 7 slices


@given(st.lists(st.floats(0.0, 1.0), min_size=7, max_size=7))
def test_the_slice_weighted_mean_of_the_instances_is_the_gpus_activity_as_the_rules_compute_it(activity):
    sim = sim_with(dict(enumerate(activity)))
    readings = SimBackend(sim).read()
    slices = {"3g.40gb": 3, "2g.20gb": 2}
    for k in (2, 3, 4, 5, 6):
        mine = [(slices[i.profile], i.sm_active) for i in readings.instances if i.gpu == k]
        mean = sum(s * v for s, v in mine) / sum(s for s, _ in mine)
        assert mean == pytest.approx(sim.sm_active[k], abs=1e-4)


def test_a_mig_gpu_has_no_gpu_level_utilisation_or_activity_and_declares_both_unsupported():
    sim = sim_with({0: 0.3, 2: 0.5})
    reg = scrape(SimBackend(sim))
    mig_uuids = {g.uuid for g in sim.fleet.gpus if g.node != "whole-00"}
    whole = {g.uuid for g in sim.fleet.gpus if g.node == "whole-00"}
    for name in MIG_FIELDS:
        per_gpu = {s.labels["UUID"] for s in samples(reg, name) if "GPU_I_ID" not in s.labels}
        assert per_gpu == whole, name
        declared = {s.labels["UUID"] for s in samples(reg, "gputide_exporter_unsupported_field_info")
                    if s.labels["field"] == name}
        assert declared == mig_uuids, name
    assert not samples(reg, "gputide_exporter_collect_errors_total")
    assert reg.get_sample_value("DCGM_FI_PROF_SM_ACTIVE", {**SimBackend(sim).identity[0].labels()}) == 0.3


def test_an_offline_mig_gpu_loses_its_instances_and_its_unsupported_fields_are_no_errors():
    sim = sim_with()
    sim.fail_gpu(2)
    sim.step()
    reg = scrape(SimBackend(sim))
    lost = sim.fleet.gpus[2].uuid
    assert ("mig-00", "0") not in {(h, g) for h, g, _, _ in instances(reg)}
    assert len(instances(reg)) == 3 * 3 + 1
    failed = {s.labels["field"] for s in samples(reg, "gputide_exporter_collect_errors_total")
              if s.labels["UUID"] == lost}
    assert "DCGM_FI_DEV_GPU_TEMP" in failed and not failed & set(MIG_FIELDS)


def test_one_node_mode_publishes_that_nodes_instances_under_its_own_gpu_indices():
    sim = sim_with({4: 0.5, 5: 1.0})
    reg = scrape(SimBackend(sim, node="mig-01"))
    got = instances(reg)
    assert {(h, g) for h, g, _, _ in got} == {("mig-01", "0"), ("mig-01", "1")}
    assert got["mig-01", "0", "2", "2g.20gb"] == 0.25 and got["mig-01", "1", "3", "2g.20gb"] == 1.0
    assert instances(scrape(SimBackend(sim, node="whole-00"))) == {}
