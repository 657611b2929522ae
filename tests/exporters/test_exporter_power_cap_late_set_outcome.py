"""A power-limit Set that missed its deadline (pending) is judged from what it returned, once it has.

fa5c495 threw the late call's outcome away and guessed from the GPU's limit alone (audit s33a8, p4_operator, p3_lost):
a late Set the driver refused, followed by an operator's ``nvidia-smi -pl`` at the watts it asked, was taken for
gputide's own cap (given back to 700 W, over the operator's 250 W, where the agent before fa5c495, refused in time,
kept 250 W); and a pending Set that returned GpuIsLost kept the sync saying it 'has not returned'. Now the target
hands back each late Set's outcome (`NvmlBackend.returned_sets`): an error means it did not take, whatever the limit
reads (the watts set mean it did).

Bounded: hung calls wait at most `BOUND_S` (`HungDevice`), threads joined with a timeout."""

from __future__ import annotations

import json

from exporters.backends.fake_nvml import NVMLError_NoPermission
from tests.exporters.test_exporter_nvml_gpu_late_served import returned
from tests.exporters.test_exporter_power_cap_late_set import SET, lands, late_set, node


def refused_late_then_set_by_hand(tmp_path):
    """GPU-1 capped at 300 W; a Set to 250 W misses its deadline and returns refused; then the operator's
    ``nvidia-smi -pl 250``: `node`'s (devs, nvml, backend, source, agent, state)."""
    devs, nvml, backend, source, agent, state = node(tmp_path, {"GPU-1": 300.0})
    assert agent.sync() == {"GPU-1": 300.0}
    source.caps = {"GPU-1": 250.0}
    devs[1].fail = {SET: NVMLError_NoPermission}   # refused once it returns
    try:
        late_set(nvml, agent)
    finally:
        lands(nvml, backend)
    devs[1].fail = {}
    assert devs[1].limit_mw == 300_000
    devs[1].limit_mw = 250_000   # the operator's nvidia-smi -pl 250, after the refused Set returned
    return devs, nvml, backend, source, agent, state


def test_a_late_set_refused_then_an_operators_limit_at_its_watts_is_the_operators(tmp_path):
    devs, nvml, backend, source, agent, state = refused_late_then_set_by_hand(tmp_path)
    agent.sync()
    assert json.loads(state.read_text())["GPU-1"]["before_w"] == 250.0   # the operator's, not gputide's
    source.caps = {}
    agent.sync()
    assert devs[1].limit_mw == 250_000   # given back to the operator's limit, not 700 W


def test_a_pending_set_that_returned_gpu_is_lost_is_pending_no_more(tmp_path):
    devs, nvml, backend, source, agent, state = node(tmp_path, {"GPU-1": 300.0})
    assert agent.sync() == {"GPU-1": 300.0}
    source.caps = {"GPU-1": 250.0}
    try:
        late_set(nvml, agent)
        devs[1].lost = True   # falls off the bus: the hung Set returns GpuIsLost
    finally:
        lands(nvml, backend)
    returned(backend.reads)
    agent.sync()
    assert "has not returned" not in agent.failed and "pending_w" not in json.loads(state.read_text())["GPU-1"]
