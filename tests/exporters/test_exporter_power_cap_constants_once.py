"""A Set clamps to the GPU's default power limit and allowed range as first read under this NVML initialisation
(`exporters.backends.nvml_power.NvmlPowerCaps._constant`: constants of the board), not read again at every Set: a
Set asked NVML four times (the limit, its range, the default, the Set), on a slow GPU four slow calls under the
reads' deadline where two do. The limit read, every sync, uses the same: one call a GPU (its limit now), not three.
NVML initialised again asks them again (a reloaded driver may say otherwise of the board). A board without one
(NotSupported) is asked once too, until its time-to-live passes (a GPU in recovery may answer it for a while); a
transient error and an answer no board gives are asked again."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from exporters.backends import nvml_power
from exporters.backends.fake_nvml import (
    FakeDevice,
    FakeNvml,
    NVMLError_DriverNotLoaded,
    NVMLError_InvalidArgument,
    NVMLError_NotSupported,
    NVMLError_Timeout,
)
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_power import NOT_SUPPORTED_TTL_S
from exporters.power_caps import PowerCapError
from tests.cli.test_cli_health import Clock

LIMIT, SET = "nvmlDeviceGetPowerManagementLimit", "nvmlDeviceSetPowerManagementLimit"
DEFAULT, RANGE = "nvmlDeviceGetPowerManagementDefaultLimit", "nvmlDeviceGetPowerManagementLimitConstraints"
POWER = {LIMIT, SET, DEFAULT, RANGE}
W = 1000   # milliwatts


def node() -> tuple[FakeNvml, NvmlBackend]:
    gpus = [FakeDevice(uuid="GPU-0", minor=0), FakeDevice(uuid="GPU-1", minor=1, bus_id="00000000:2A:00.0")]
    nvml = FakeNvml(gpus)
    return nvml, NvmlBackend(nvml, hostname="n1")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The monotonic clock a remembered NotSupported ages on (`NvmlPowerCaps.clock`), moved by the test."""
    clock = Clock()
    monkeypatch.setattr(nvml_power, "time", SimpleNamespace(monotonic=clock))
    return clock


def asked(nvml: FakeNvml, since: int) -> list[tuple[str, str]]:
    """The power-limit calls NVML was asked since `since`, by (function, GPU), sorted (GPUs are asked in threads)."""
    return sorted(a for a in nvml.asked[since:] if a[0] in POWER)


def test_a_set_after_a_limit_read_asks_nvml_for_the_limit_and_the_set_alone():
    nvml, backend = node()
    for watts in (300.0, 250.0):
        n = len(nvml.asked)
        backend.power_limits()
        assert asked(nvml, n) == sorted((fn, gpu) for fn in ((LIMIT, DEFAULT, RANGE) if watts == 300.0 else (LIMIT,))
                                        for gpu in ("GPU-0", "GPU-1"))   # the constants the first time only
        n = len(nvml.asked)
        assert backend.apply_power_caps({"GPU-0": watts}) == {"GPU-0": watts}
        assert asked(nvml, n) == [(LIMIT, "GPU-0"), (SET, "GPU-0")]   # was 4: the range and the default again
        assert nvml.devices[0].limit_mw == watts * W


def test_sets_without_a_limit_read_ask_the_constants_once():
    nvml, backend = node()
    for watts in (300.0, 250.0):   # no limit read: nothing to compare, the constants asked at the first Set
        n = len(nvml.asked)
        backend.apply_power_caps({"GPU-1": watts})
        assert asked(nvml, n) == (sorted([(RANGE, "GPU-1"), (DEFAULT, "GPU-1"), (SET, "GPU-1")]) if watts == 300.0
                                  else [(SET, "GPU-1")])
    assert nvml.devices[1].limit_mw == 250 * W


def test_after_nvml_is_initialised_again_a_set_clamps_to_what_the_new_initialisation_read():
    """No limit read after the re-initialisation (the collection's `read()` initialises NVML again): the Set alone
    tells whether the earlier initialisation's constants are kept."""
    nvml, backend = node()
    assert backend.apply_power_caps({"GPU-0": 900.0}) == {"GPU-0": 700.0}   # the constants asked, and remembered
    nvml.broken = NVMLError_DriverNotLoaded
    backend.read()   # NVML stopped: every field an error
    nvml.broken = None
    nvml.devices[0].default_limit_mw = 650 * W   # what the reloaded driver says of the board
    backend.read()
    assert backend.nvml_reinits == 1
    n = len(nvml.asked)
    assert backend.apply_power_caps({"GPU-0": 900.0}) == {"GPU-0": 650.0}   # not the 700 W of the old one
    assert asked(nvml, n) == sorted([(RANGE, "GPU-0"), (DEFAULT, "GPU-0"), (SET, "GPU-0")])   # asked again
    assert nvml.devices[0].limit_mw == 650 * W


def test_limit_reads_ask_each_gpu_for_its_limit_alone_once_the_constants_are_known():
    nvml, backend = node()
    backend.power_limits()
    for _ in range(3):
        n = len(nvml.asked)
        limits = backend.power_limits()
        assert asked(nvml, n) == [(LIMIT, "GPU-0"), (LIMIT, "GPU-1")]   # was 3 a GPU: the range and default again
        assert limits["GPU-0"] == (700.0, 700.0, 200.0)   # the constants as first read
    nvml.devices[0].limit_mw = 400 * W   # nvidia-smi -pl: the limit is read every time
    assert backend.power_limits()["GPU-0"].current_w == 400.0


def test_after_nvml_is_initialised_again_a_limit_read_asks_the_constants_anew_once():
    nvml, backend = node()
    backend.power_limits()
    nvml.broken = NVMLError_DriverNotLoaded
    backend.read()
    nvml.broken = None
    nvml.devices[0].default_limit_mw = 650 * W   # what the reloaded driver says of the board
    backend.read()
    assert backend.nvml_reinits == 1
    n = len(nvml.asked)
    assert backend.power_limits()["GPU-0"].default_w == 650.0   # not the 700 W of the old initialisation
    assert asked(nvml, n) == sorted((fn, gpu) for fn in (LIMIT, DEFAULT, RANGE) for gpu in ("GPU-0", "GPU-1"))
    n = len(nvml.asked)
    assert backend.power_limits()["GPU-0"].default_w == 650.0
    assert asked(nvml, n) == [(LIMIT, "GPU-0"), (LIMIT, "GPU-1")]


def test_a_range_nvml_does_not_support_is_asked_once_a_timeout_again():
    """GPU-1's allowed range answers NotSupported (the board has none): asked at every read it was two calls a read,
    each under the deadline on a slow GPU. GPU-0's times out: it may answer at the next read, so it is asked again."""
    nvml, backend = node()
    nvml.devices[0].fail[RANGE] = NVMLError_Timeout
    nvml.devices[1].fail[RANGE] = NVMLError_NotSupported
    backend.power_limits()
    for _ in range(3):
        n = len(nvml.asked)
        limits = backend.power_limits()
        assert asked(nvml, n) == [(LIMIT, "GPU-0"), (LIMIT, "GPU-1"), (RANGE, "GPU-0")]   # GPU-1's range: not again
        assert limits["GPU-1"][:2] == (700.0, 700.0) and math.isnan(limits["GPU-1"].min_w)
        assert math.isnan(limits["GPU-0"].min_w)
    n = len(nvml.asked)
    with pytest.raises(PowerCapError) as refused:   # a Set on it is refused as it was, without asking the range again
        backend.apply_power_caps({"GPU-1": 300.0})
    assert asked(nvml, n) == [(LIMIT, "GPU-1")]
    assert "NotSupported" in refused.value.refused["GPU-1"] and nvml.devices[1].limit_mw == 700 * W
    del nvml.devices[0].fail[RANGE]   # the timeout passed: read, then remembered
    assert backend.power_limits()["GPU-0"].min_w == 200.0
    n = len(nvml.asked)
    assert backend.power_limits()["GPU-0"].min_w == 200.0
    assert asked(nvml, n) == [(LIMIT, "GPU-0"), (LIMIT, "GPU-1")]


def test_a_default_nvml_does_not_support_is_asked_once():
    nvml, backend = node()
    nvml.devices[1].fail[DEFAULT] = NVMLError_NotSupported
    backend.power_limits()
    for _ in range(3):
        n = len(nvml.asked)
        limit = backend.power_limits()["GPU-1"]
        assert asked(nvml, n) == [(LIMIT, "GPU-0"), (LIMIT, "GPU-1")]   # was the default again on GPU-1
        assert math.isnan(limit.current_w) and math.isnan(limit.default_w)   # unread, as before


@pytest.mark.parametrize(("bogus", "fixed"), [
    ({"default_limit_mw": 0}, {"default_limit_mw": 700 * W}),
    ({"min_limit_mw": 800 * W}, {"min_limit_mw": 200 * W}),   # its minimum above its maximum
    ({"min_limit_mw": 0}, {"min_limit_mw": 200 * W}),
])
def test_an_answer_no_board_gives_is_not_kept_for_the_initialisation(bogus, fixed):
    """Kept, a default of 0 clamped every Set to 0 mW (refused by the driver) and a range above its maximum or at 0
    read so until NVML was initialised again; used for that call as before, asked again at the next."""
    nvml, backend = node()
    vars(nvml.devices[0]).update(bogus)
    backend.power_limits()
    vars(nvml.devices[0]).update(fixed)
    n = len(nvml.asked)
    assert backend.power_limits()["GPU-0"] == (700.0, 700.0, 200.0)   # the board's answer now
    assert (DEFAULT if "default_limit_mw" in bogus else RANGE, "GPU-0") in asked(nvml, n)
    assert backend.apply_power_caps({"GPU-0": 100.0}) == {"GPU-0": 200.0}   # clamped to what the board says
    assert nvml.devices[0].limit_mw == 200 * W


def test_a_bogus_default_clamps_that_set_alone():
    nvml, backend = node()
    nvml.devices[0].default_limit_mw = 0
    with pytest.raises(PowerCapError) as refused:   # clamped to 0 mW, the driver refuses it: as every Set did before
        backend.apply_power_caps({"GPU-0": 300.0})
    assert NVMLError_InvalidArgument.__name__ in refused.value.refused["GPU-0"]
    nvml.devices[0].default_limit_mw = 700 * W
    assert backend.apply_power_caps({"GPU-0": 300.0}) == {"GPU-0": 300.0}   # was refused until a re-init


def test_a_default_nvml_does_not_support_for_a_while_is_asked_again_after_its_time_to_live(clock):
    """A GPU in recovery (an XID, a reset: NVML is not initialised again) answered NotSupported for its default:
    remembered for the whole initialisation, its limit read NaN at every sync (the agent failed each, never gave a
    cap back) until the agent restarted."""
    nvml, backend = node()
    nvml.devices[1].fail[DEFAULT] = NVMLError_NotSupported
    assert math.isnan(backend.power_limits()["GPU-1"].default_w)
    del nvml.devices[1].fail[DEFAULT]   # recovered
    clock.now += NOT_SUPPORTED_TTL_S - 1
    n = len(nvml.asked)
    assert math.isnan(backend.power_limits()["GPU-1"].default_w)   # still remembered: not asked
    assert asked(nvml, n) == [(LIMIT, "GPU-0"), (LIMIT, "GPU-1")]
    clock.now += 1
    n = len(nvml.asked)
    assert backend.power_limits()["GPU-1"] == (700.0, 700.0, 200.0)
    assert asked(nvml, n) == sorted([(LIMIT, "GPU-0"), (LIMIT, "GPU-1"), (DEFAULT, "GPU-1"),   # asked again, kept
                                     (RANGE, "GPU-1")])   # not asked while its default was NotSupported
    n = len(nvml.asked)
    backend.power_limits()
    assert asked(nvml, n) == [(LIMIT, "GPU-0"), (LIMIT, "GPU-1")]


def test_a_set_refused_from_a_remembered_range_says_so_and_one_after_its_time_to_live_is_made(clock):
    nvml, backend = node()
    nvml.devices[0].fail[RANGE] = NVMLError_NotSupported
    backend.power_limits()
    del nvml.devices[0].fail[RANGE]   # recovered: remembered, every Set on it was refused until the agent restarted
    clock.now += 60
    backend.power_limits()
    n = len(nvml.asked)
    with pytest.raises(PowerCapError) as refused:
        backend.apply_power_caps({"GPU-0": 300.0})
    assert asked(nvml, n) == [(LIMIT, "GPU-0")]   # the range not asked
    why = refused.value.refused["GPU-0"]
    assert "NotSupported" in why and "remembered from 60 s ago" in why and "asked again in 540 s" in why, why
    clock.now += NOT_SUPPORTED_TTL_S - 60
    backend.power_limits()
    n = len(nvml.asked)
    assert backend.apply_power_caps({"GPU-0": 300.0}) == {"GPU-0": 300.0}
    assert asked(nvml, n) == [(LIMIT, "GPU-0"), (SET, "GPU-0")]   # the range asked again by the read, and kept
    assert nvml.devices[0].limit_mw == 300 * W


def test_a_board_with_a_fixed_limit_is_a_board_and_kept():
    """A range whose minimum is its maximum (a board whose limit cannot be changed) is one a board gives: kept, not
    asked at every read, and a Set clamps to it (the limit in force already: not Set)."""
    nvml, backend = node()
    nvml.devices[0].min_limit_mw = 700 * W
    backend.power_limits()
    n = len(nvml.asked)
    assert backend.power_limits()["GPU-0"] == (700.0, 700.0, 700.0)
    assert asked(nvml, n) == [(LIMIT, "GPU-0"), (LIMIT, "GPU-1")]
    n = len(nvml.asked)
    assert backend.apply_power_caps({"GPU-0": 300.0}) == {"GPU-0": 700.0}
    assert asked(nvml, n) == [(LIMIT, "GPU-0")]   # at 700 W already: no Set (the board would refuse it)
