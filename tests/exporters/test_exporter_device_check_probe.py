"""The device check (bench/device/check_nvml.py) is run only when the workplace lends a GPU machine, so a rename in
the NVML backend would break it unseen until that scarce time is spent. Its in-process probe runs here on the fake
NVML: it must still read every GPU, the GPM and XID-event state and the power-cap path."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _check_nvml():
    spec = importlib.util.spec_from_file_location("check_nvml", ROOT / "bench" / "device" / "check_nvml.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_probe_runs_on_the_fake_nvml():
    out = _check_nvml().probe(True)
    assert len(out["gpus"]) == 1
    gpu = out["gpus"][0]
    assert gpu["identity"]["UUID"] == "GPU-fake-0"
    assert out["xid_events"] == [True]
    assert gpu["gpm"] in (True, False)
    assert gpu["power_cap_reapplied"]["limit_mw"] == gpu["power_cap_reapplied"]["after_mw"]
    assert out["read_ms"]["n"] == 50
