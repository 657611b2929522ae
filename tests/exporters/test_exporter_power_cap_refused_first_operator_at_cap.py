"""A first cap this agent saw refused (in time, or late and then refused), followed by an operator's
``nvidia-smi -pl`` at the cap's watts: that limit is the operator's, so the give-back leaves it (`PowerCapAgent.
_not_capped_yet`).

A GPU found at the cap asked before any cap was written down is taken for gputide's (its Set landed and the agent
stopped before it wrote so): right for an agent restarted, wrong for the one that saw its own Set refused, none of
whose Sets landed. The give-back then raised the operator's 250 W to the 700 W found before (review s33r3 finding 3
LOW). The refusal is kept in the state file, so an agent restarted meanwhile knows it too
(test_exporter_power_cap_refused_first_restarted); one with no refusal written down still takes it for gputide's
(test_exporter_power_cap_refused_first)."""

from __future__ import annotations

import pytest

from exporters.backends.fake_nvml import NVMLError_NoPermission
from tests.exporters.test_exporter_power_cap_late_set import SET, lands, late_set, node


def refused_first_cap(tmp_path, late: bool):
    """(GPUs, backend, source, agent, state file) of a node whose first cap of GPU-1, 250 W, the driver refused (in
    time, or late: it has returned refused, not yet judged by a sync), and still refuses."""
    devs, nvml, backend, source, agent, state = node(tmp_path, {})
    agent.sync()
    source.caps = {"GPU-1": 250.0}
    devs[1].fail = {SET: NVMLError_NoPermission}
    if late:
        try:
            late_set(nvml, agent)
        finally:
            lands(nvml, backend)
    else:
        agent.sync()
    return devs, backend, source, agent, state


@pytest.mark.parametrize("late", [False, True])
def test_an_operator_limit_at_the_refused_first_caps_watts_is_given_back_to_itself(tmp_path, late):
    devs, _, source, agent, _ = refused_first_cap(tmp_path, late)
    devs[1].fail = {}
    assert devs[1].limit_mw == 700_000
    devs[1].limit_mw = 250_000   # the operator: nvidia-smi -pl 250
    agent.sync()
    assert agent.before.get("GPU-1").before_w == 250.0
    source.caps = {}
    agent.sync()
    assert devs[1].limit_mw == 250_000   # the operator's, not the 700 W found before the refused cap
