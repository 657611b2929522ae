"""A first cap that landed under an agent stopped before it wrote so, then asked again by a restarted agent whose Set
the driver refuses (no CAP_SYS_ADMIN any more), is still gputide's cap: its give-back restores the limit found
before (audit of 7b97569f, finding 2).

The restarted agent took the GPU at the cap asked for gputide's own, but wrote nothing down; its repeat Set refused
was then a first cap refused (``"refused": true``), so the next sync took the 250 W for an operator's ``nvidia-smi
-pl`` and the give-back left the GPU at 250 W, not the 700 W found before. Now the limit is written down as the one
gputide set (`PowerCapAgent._not_capped_yet`), and a refusal of a cap already set is no refused first cap."""

from __future__ import annotations

import json

from exporters.backends.fake_nvml import NVMLError_NoPermission
from exporters.power_caps import PowerCapAgent
from exporters.power_limits_before import LimitsBefore
from tests.exporters.test_exporter_power_cap_late_set import SET, node


def test_a_landed_first_cap_asked_again_and_refused_after_a_restart_is_given_back_to_the_limit_before(tmp_path):
    devs, _, backend, source, agent, state = node(tmp_path, {"GPU-1": 250.0})
    agent.sync()
    assert devs[1].limit_mw == 250_000
    state.write_text(json.dumps({"GPU-1": {"before_w": 700.0}}))   # the agent stopped before it wrote the Set down
    agent = PowerCapAgent(source, backend, LimitsBefore(state))   # restarted, unprivileged
    devs[1].fail = {SET: NVMLError_NoPermission}
    agent.sync()   # the cap asked again: refused
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 700.0, "set_w": 250.0}}   # was: "refused": true
    agent.sync()
    assert agent.before.get("GPU-1").before_w == 700.0   # was: 250 W, taken for an operator's
    devs[1].fail = {}
    source.caps = {}
    agent.sync()
    assert devs[1].limit_mw == 700_000   # given back (was: left at 250 W)
    assert json.loads(state.read_text()) == {}
