"""The NVML backend through the in-repo fake NVML: units, GPM, fallbacks, errors that drop only their series."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_NoPermission
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GPU_FIELD_NAMES, GpuCollector
from exporters.exposition import render


def _fake(n: int = 2, **kw) -> tuple[FakeNvml, list[FakeDevice]]:
    devs = [FakeDevice(uuid=f"GPU-{i:08d}", minor=i, bus_id=f"00000000:{0x18 + 16 * i:02X}:00.0", **kw)
            for i in range(n)]
    return FakeNvml(devs), devs


def _scrape(backend):
    reg = CollectorRegistry()
    reg.register(GpuCollector(backend))
    text = render(reg).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    return reg, {name: {s.labels["UUID"]: s.value for s in fams[name].samples} for name in GPU_FIELD_NAMES}


def test_readings_are_converted_to_dcgm_units_and_labelled_like_dcgm_exporter():
    nvml, devs = _fake()
    backend = NvmlBackend(nvml, hostname="node-a")
    reg, v = _scrape(backend)
    u = devs[1].uuid
    assert v["DCGM_FI_DEV_POWER_USAGE"][u] == 350.0 and v["DCGM_FI_DEV_POWER_MGMT_LIMIT"][u] == 700.0
    assert v["DCGM_FI_DEV_FB_USED"][u] == 20480 and v["DCGM_FI_DEV_FB_FREE"][u] == 61440
    assert v["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][u] == 123_456_789
    assert v["DCGM_FI_DEV_MEMORY_TEMP"][u] == 52 and v["DCGM_FI_DEV_SLOWDOWN_TEMP"][u] == 87
    assert v["DCGM_FI_DEV_XID_ERRORS"][u] == 0
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", {
        "gpu": "1", "UUID": u, "pci_bus_id": "00000000:28:00.0", "device": "nvidia1",
        "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-a", "DCGM_FI_DRIVER_VERSION": "580.159.04"}) == 45.0
    assert nvml.calls.count("nvmlDeviceGetFieldValues") >= 2  # one batch per GPU per scrape


def test_power_is_the_one_second_average_not_the_instant_reading():
    # what a real H200 at its 700 W limit answered (bench/device/h200-2026-12-04): instant 704.8 W, average 692 W
    nvml, devs = _fake(1, power_mw=692_000, power_instant_mw=704_823, limit_mw=700_000)
    _, v = _scrape(NvmlBackend(nvml))
    assert v["DCGM_FI_DEV_POWER_USAGE"][devs[0].uuid] == 692.0


@pytest.mark.parametrize(("arch", "gpm", "second"), [
    (9, 55.0, 0.55),
    (8, 55.0, None),
    (9, None, None),
], ids=["hopper with GPM: no sample on the first scrape, then GPM between samples", "ampere: none, ever",
        "hopper without GPM support: none, ever"])
def test_sm_activity_comes_from_gpm_only_never_from_utilisation(arch, gpm, second):
    # dcgm-exporter's DCGM_FI_PROF_SM_ACTIVE is the fraction of cycles with a warp resident: utilisation (60 % here)
    # is another measure, so a GPU without GPM has no series (the rules fall back to utilisation, not the exporter)
    nvml, devs = _fake(1, arch=arch, gpm_sm_util=gpm, util=60)
    backend = NvmlBackend(nvml)
    u = devs[0].uuid
    reg, v = _scrape(backend)
    assert u not in v["DCGM_FI_PROF_SM_ACTIVE"] and v["DCGM_FI_DEV_GPU_UTIL"][u] == 60
    assert reg.get_sample_value("gputide_exporter_collect_errors_total",
                                {"UUID": u, "field": "DCGM_FI_PROF_SM_ACTIVE"}) is None
    for _ in range(2):
        reg, v = _scrape(backend)
    assert v["DCGM_FI_PROF_SM_ACTIVE"].get(u) == (None if second is None else pytest.approx(second))
    declared = reg.get_sample_value("gputide_exporter_unsupported_field_info",
                                    {"UUID": u, "field": "DCGM_FI_PROF_SM_ACTIVE"})
    assert declared == (1.0 if second is None else None)   # no GPM: declared unsupported from the first scrape
    assert reg.get_sample_value("gputide_exporter_collect_errors_total",
                                {"UUID": u, "field": "DCGM_FI_PROF_SM_ACTIVE"}) is None


def test_gpm_failing_is_a_collect_error_for_sm_activity_and_no_utilisation_stands_in():
    nvml, devs = _fake(1)
    backend = NvmlBackend(nvml)
    _scrape(backend)
    devs[0].fail["nvmlGpmSampleGet"] = NVMLError_NoPermission
    reg, v = _scrape(backend)
    u = devs[0].uuid
    assert u not in v["DCGM_FI_PROF_SM_ACTIVE"]
    assert reg.get_sample_value("gputide_exporter_collect_errors_total",   # (this asks the backend again)
                                {"UUID": u, "field": "DCGM_FI_PROF_SM_ACTIVE"}) >= 1
    del devs[0].fail["nvmlGpmSampleGet"]
    _scrape(backend)   # a new first sample
    assert _scrape(backend)[1]["DCGM_FI_PROF_SM_ACTIVE"][u] == pytest.approx(0.55)


@pytest.mark.parametrize(("break_it", "lost_fields"), [
    (lambda d: d.fail.update(nvmlDeviceGetClockInfo=NVMLError_NoPermission), {"DCGM_FI_DEV_SM_CLOCK"}),
    (lambda d: d.fail.update(nvmlDeviceGetMemoryInfo=NVMLError_NoPermission),
     {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"}),
    (lambda d: d.field_ret.update({82: 999}), {"DCGM_FI_DEV_MEMORY_TEMP"}),
    (lambda d: d.field_fail.add(185), set()),  # falls back to nvmlDeviceGetPowerUsage
], ids=["clock forbidden", "memory info forbidden", "memory temperature field failing",
        "average power field not supported falls back"])
def test_a_failing_field_drops_only_that_series_on_that_gpu_and_counts_an_error(break_it, lost_fields):
    nvml, devs = _fake(2)
    backend = NvmlBackend(nvml)
    _scrape(backend)   # GPM's first sample: SM activity from the second scrape on
    break_it(devs[0])
    reg, v = _scrape(backend)
    bad, good = devs[0].uuid, devs[1].uuid
    for name in GPU_FIELD_NAMES:
        assert good in v[name], name
        assert (bad in v[name]) == (name not in lost_fields), name
        err = reg.get_sample_value("gputide_exporter_collect_errors_total", {"UUID": bad, "field": name})
        assert (err is not None) == (name in lost_fields), name
    assert v["DCGM_FI_DEV_POWER_USAGE"][bad] == 350.0


def test_a_lost_gpu_keeps_only_its_xid_79_while_the_others_are_scraped_normally():
    nvml, devs = _fake(3)
    backend = NvmlBackend(nvml)
    _scrape(backend)   # GPM's first sample: SM activity from the second scrape on
    devs[1].lost = True
    _, v = _scrape(backend)
    lost = devs[1].uuid
    assert v["DCGM_FI_DEV_XID_ERRORS"][lost] == 79
    for name in GPU_FIELD_NAMES:
        assert devs[0].uuid in v[name] and devs[2].uuid in v[name]
        assert (lost in v[name]) == (name == "DCGM_FI_DEV_XID_ERRORS"), name


def test_xid_events_are_drained_without_waiting_and_the_last_one_is_reported():
    nvml, devs = _fake(2)
    backend = NvmlBackend(nvml)
    nvml.push_xid(devs[0], 13)
    nvml.push_xid(devs[0], 48)
    _, v = _scrape(backend)
    assert v["DCGM_FI_DEV_XID_ERRORS"] == {devs[0].uuid: 48, devs[1].uuid: 0}


def test_power_caps_are_set_in_milliwatts_clamped_to_the_constraints_and_reported():
    nvml, devs = _fake(2)
    backend = NvmlBackend(nvml)
    applied = backend.apply_power_caps({devs[0].uuid: 450, devs[1].uuid: 50, "GPU-nope": 300})
    assert applied == {devs[0].uuid: 450.0, devs[1].uuid: 200.0}
    assert devs[0].limit_mw == 450_000
    _, v = _scrape(backend)
    assert v["DCGM_FI_DEV_POWER_MGMT_LIMIT"][devs[0].uuid] == 450.0


def test_memory_is_read_with_nvml_version_2_so_used_leaves_out_the_reserved_which_has_its_own_series():
    # an idle H200 (bench/device/h200-2026-12-04): nvidia-smi Used 0 MiB, Reserved 616 MiB; version 1 said 615 used
    nvml, devs = _fake(1, total_bytes=143771 << 20, used_bytes=0, reserved_bytes=616 << 20)
    reg, v = _scrape(NvmlBackend(nvml))
    u = devs[0].uuid
    assert v["DCGM_FI_DEV_FB_USED"][u] == 0 and v["DCGM_FI_DEV_FB_RESERVED"][u] == 616
    assert v["DCGM_FI_DEV_FB_FREE"][u] == 143771 - 616
    assert reg.get_sample_value("gputide_exporter_unsupported_field_info",
                                {"UUID": u, "field": "DCGM_FI_DEV_FB_RESERVED"}) is None


@pytest.mark.parametrize("missing", [FakeNvml.NVMLError_FunctionNotFound, FakeNvml.NVMLError_ArgumentVersionMismatch,
                                     FakeNvml.NVMLError_NotSupported])
def test_a_driver_without_memory_info_version_2_gets_version_1_and_no_reserved_series(missing):
    nvml, devs = _fake(2, used_bytes=20 << 30, reserved_bytes=512 << 20)
    devs[0].fail["nvmlDeviceGetMemoryInfo_v2"] = missing
    backend = NvmlBackend(nvml)
    for _ in range(2):
        reg, v = _scrape(backend)
    old, new = devs[0].uuid, devs[1].uuid
    assert v["DCGM_FI_DEV_FB_USED"][old] == 20480 + 512 and v["DCGM_FI_DEV_FB_USED"][new] == 20480  # v1: reserved in
    assert v["DCGM_FI_DEV_FB_FREE"][old] == v["DCGM_FI_DEV_FB_FREE"][new] == 81920 - 20480 - 512
    assert old not in v["DCGM_FI_DEV_FB_RESERVED"] and v["DCGM_FI_DEV_FB_RESERVED"][new] == 512
    assert reg.get_sample_value("gputide_exporter_unsupported_field_info",
                                {"UUID": old, "field": "DCGM_FI_DEV_FB_RESERVED"}) == 1.0
    assert reg.get_sample_value("gputide_exporter_collect_errors_total",
                                {"UUID": old, "field": "DCGM_FI_DEV_FB_RESERVED"}) is None
    assert nvml.asked.count(("nvmlDeviceGetMemoryInfo_v2", old)) == 1   # version 2 not asked again


def test_the_device_label_is_the_gpu_index_as_dcgm_exporter_names_it_not_the_device_minor_number():
    # a pod given two of a node's GPUs sees them as index 0 and 1, with the node's /dev/nvidia5 and /dev/nvidia2
    nvml = FakeNvml([FakeDevice(uuid="GPU-a", minor=5), FakeDevice(uuid="GPU-b", minor=2)])
    reg, _ = _scrape(NvmlBackend(nvml))
    temps = {s.labels["UUID"]: (s.labels["gpu"], s.labels["device"]) for f in reg.collect()
             if f.name == "DCGM_FI_DEV_GPU_TEMP" for s in f.samples}
    assert temps == {"GPU-a": ("0", "nvidia0"), "GPU-b": ("1", "nvidia1")}


def test_every_gpu_series_carries_the_driver_version_label_as_dcgm_exporter_does():
    nvml, _ = _fake(2)
    nvml.driver_version = b"575.57.08"   # older bindings answer bytes
    reg, _ = _scrape(NvmlBackend(nvml))
    gpu_series = [s for f in reg.collect() if f.name.startswith("DCGM_FI_") for s in f.samples]
    assert len(gpu_series) > 20 and {s.labels["DCGM_FI_DRIVER_VERSION"] for s in gpu_series} == {"575.57.08"}
    nvml.driver_version = None   # NVML will not say: the label is empty, which Prometheus reads as no label
    reg, _ = _scrape(NvmlBackend(nvml))
    assert {s.labels["DCGM_FI_DRIVER_VERSION"] for f in reg.collect() if f.name == "DCGM_FI_DEV_GPU_TEMP"
            for s in f.samples} == {""}


def test_the_xid_series_carries_dcgm_exporters_err_code_and_err_msg_labels_and_follows_a_new_xid():
    nvml, devs = _fake(3)
    backend = NvmlBackend(nvml, hostname="node-a")
    reg = CollectorRegistry()
    reg.register(GpuCollector(backend))

    def xids():
        text = render(reg).decode()
        fam = next(f for f in text_string_to_metric_families(text) if f.name == "DCGM_FI_DEV_XID_ERRORS")
        return {s.labels["UUID"]: (s.value, s.labels["err_code"], s.labels["err_msg"]) for s in fam.samples}

    assert set(xids().values()) == {(0.0, "0", "No Error")}
    nvml.push_xid(devs[0], 48)
    nvml.push_xid(devs[1], 999)
    got = xids()
    assert got[devs[0].uuid] == (48.0, "48", "Double Bit ECC Error")
    assert got[devs[1].uuid] == (999.0, "999", "Unknown Error")   # dcgm-exporter's word for a code it has no text for
    assert got[devs[2].uuid] == (0.0, "0", "No Error")
    nvml.push_xid(devs[0], 79)
    assert xids()[devs[0].uuid] == (79.0, "79", "GPU has fallen off the bus")   # the labels follow the value
