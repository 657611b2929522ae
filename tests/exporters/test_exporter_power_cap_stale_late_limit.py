"""A limit read that missed its deadline, used at the next sync once returned (0d0e806), may be stale: it sampled the
GPU's limit, then hung, and an operator's ``nvidia-smi -pl 250`` came meanwhile (audit s33a15, s1_stale_giveback,
s2_stale_firstcap). The agent decided on the old limit: a give-back raised the operator's 250 W to 700 W, a first cap
recorded 700 W as the limit before over the operator's 250 W. Now each Set is a compare-and-set in the GPU's job
(`NvmlPowerCaps._set`): the limit is read again right before it, and a Set whose GPU no longer runs at the limit the
decision used is not made (refused, judged again at the next sync on the limit read then).

Also pinned: a Set forgets a late limit read of its GPU (it read the limit before the Set), and a re-initialisation
of NVML keeps what a pending Set returned (`returned_sets`), rather than judging it from the limit again.

Bounded: hung calls wait at most `BOUND_S` (`HungDevice`), threads joined with a timeout."""

from __future__ import annotations

import json

from exporters.backends.fake_nvml import NVMLError_Uninitialized
from tests.exporters.test_exporter_power_cap_late_set import lands
from tests.exporters.test_exporter_power_cap_late_set import node as hung_node
from tests.exporters.test_exporter_power_cap_late_set_outcome import refused_late_then_set_by_hand
from tests.exporters.test_exporter_power_cap_stuck_gpu import HungDevice, in_thread

LIMIT = "nvmlDeviceGetPowerManagementLimit"


class SampledThenHung(HungDevice):
    """The limit read of the GPU `hung` samples its limit, then hangs (`hang_on` LIMIT): what it returns once
    released is the limit as it was. A limit read is that one call (the default and range are asked once per NVML
    initialisation, `NvmlPowerCaps._constant`), so the stale read is a call inside NVML, not one of three."""

    def nvmlDeviceGetPowerManagementLimit(self, h):
        if self.hung is None:
            return super().nvmlDeviceGetPowerManagementLimit(h)
        sampled = self._target(h).limit_mw
        self._dev(h, LIMIT)   # hangs on the GPU `hung`
        return sampled


def node(tmp_path, caps):
    return hung_node(tmp_path, caps, SampledThenHung)


def stale_read(nvml, backend, agent, devs, operator_mw: int) -> None:
    """A sync whose limit read of GPU-1 samples the limit, then hangs; the operator sets `operator_mw` meanwhile; the
    read returns, to be used at the next sync."""
    nvml.hung, nvml.hang_on = "GPU-1", LIMIT
    try:
        t, _ = in_thread(agent.sync)
        assert not t.is_alive() and "could not be read" in agent.failed
        devs[1].limit_mw = operator_mw   # nvidia-smi -pl while the read is inside NVML
    finally:
        lands(nvml, backend)


def test_a_give_back_judged_on_a_stale_late_read_leaves_the_operators_limit(tmp_path):
    devs, nvml, backend, source, agent, state = node(tmp_path, {"GPU-1": 300.0})
    assert agent.sync() == {"GPU-1": 300.0}
    source.caps = {}   # the controller gives back
    stale_read(nvml, backend, agent, devs, 250_000)
    assert agent.sync() == {} and "not set" in agent.failed   # the read said 300 W, the GPU runs at 250 W
    assert devs[1].limit_mw == 250_000   # not raised to 700 W over the operator's limit
    agent.sync()
    assert devs[1].limit_mw == 250_000 and agent.failed is None and json.loads(state.read_text()) == {}


def test_a_first_cap_judged_on_a_stale_late_read_keeps_the_operators_limit_as_the_one_before(tmp_path):
    devs, nvml, backend, source, agent, state = node(tmp_path, {})
    agent.sync()
    source.caps = {"GPU-1": 300.0}
    stale_read(nvml, backend, agent, devs, 250_000)
    agent.sync()   # the read said 700 W: the Set is not made
    assert devs[1].limit_mw == 250_000
    agent.sync()
    assert json.loads(state.read_text())["GPU-1"]["before_w"] == 250.0   # the operator's, not 700 W
    assert devs[1].limit_mw == 250_000   # the cap held to it
    source.caps = {}
    agent.sync()
    assert devs[1].limit_mw == 250_000 and json.loads(state.read_text()) == {}


def test_a_set_made_on_the_limit_read_goes_through(tmp_path):
    devs, nvml, backend, source, agent, state = node(tmp_path, {})
    limits = backend.power_limits()
    assert limits["GPU-1"].current_w == 700.0
    assert backend.apply_power_caps({"GPU-1": 300.0}) == {"GPU-1": 300.0} and devs[1].limit_mw == 300_000
    assert backend.apply_power_caps({"GPU-1": 280.0}) == {"GPU-1": 280.0}   # no read since: nothing to compare


def test_a_set_forgets_the_late_limit_read_of_its_gpu(tmp_path):
    devs, nvml, backend, source, agent, state = node(tmp_path, {})
    nvml.hung, nvml.hang_on = "GPU-1", LIMIT
    try:
        t, out = in_thread(backend.power_limits)   # GPU-1's read samples 700 W, then hangs: NaN this time
        assert out["result"]["GPU-1"].current_w != out["result"]["GPU-1"].current_w
    finally:
        lands(nvml, backend)
    assert backend.apply_power_caps({"GPU-1": 300.0}) == {"GPU-1": 300.0}   # after the late read returned
    assert backend.power_limits()["GPU-1"].current_w == 300.0   # read again, not the late read's 700 W


def test_a_pending_sets_outcome_outlives_a_reinitialisation_of_nvml(tmp_path):
    devs, nvml, backend, source, agent, state = refused_late_then_set_by_hand(tmp_path)
    nvml.broken = NVMLError_Uninitialized   # NVML stops answering: the collection finds it, then initialises it again
    backend.read()
    nvml.broken = None
    backend.read()
    assert backend.nvml_reinits == 1
    agent.sync()
    assert json.loads(state.read_text())["GPU-1"]["before_w"] == 250.0   # refused: the operator's, not gputide's
    source.caps = {}
    agent.sync()
    assert devs[1].limit_mw == 250_000   # given back to the operator's limit, not 700 W
