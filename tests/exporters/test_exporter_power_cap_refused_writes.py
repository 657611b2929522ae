"""A refused first cap costs at most two writes of the state file a sync, however many GPUs are refused (audit s34x8
of ceaacb74, finding 3): each refused GPU's record was cleared before the Set and written refused again after it, one
write each, so two whole-file writes per GPU every sync (12 a minute for each at 10 s). Now `_unrefuse`'s clears go in
one write and `_apply`'s refusals in another (`LimitsBefore.put_many`)."""

from __future__ import annotations

import json

import exporters.power_limits_before as limits_before
from exporters.backends.fake_nvml import NVMLError_NoPermission
from tests.exporters.test_exporter_power_cap_late_set import SET, node


def test_refused_first_caps_cost_two_writes_a_sync_whatever_the_gpus(tmp_path, monkeypatch):
    devs, _, _, source, agent, state = node(tmp_path, {})
    agent.sync()
    source.caps = {"GPU-0": 250.0, "GPU-1": 250.0}
    for dev in devs:
        dev.fail = {SET: NVMLError_NoPermission}
    agent.sync()
    writes = []
    save = limits_before.LimitsBefore._save
    monkeypatch.setattr(limits_before.LimitsBefore, "_save", lambda self: (writes.append(1), save(self))[1])
    per_sync = []
    for _ in range(5):
        agent.sync()
        per_sync.append(len(writes))
        writes.clear()
    # refused at sync 2 (above), asked again at syncs 3 and 5, not between (a refusal for good backs off)
    assert per_sync == [2, 0, 2, 0, 0]   # was 4 a sync asked: 2 a GPU
    assert json.loads(state.read_text()) == {f"GPU-{i}": {"before_w": 700.0, "refused": True} for i in range(2)}
