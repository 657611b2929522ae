"""A power cap with an expiry (`Expiring`): the agent gives it back once the expiry has passed by its own clock, plus
a margin for a controller whose clock lags the node's, as a give-back would (a limit set by hand since is left),
logs it at WARNING and lists it in `expired` once per GPU and expiry. Before, a cap stayed in force for as long as
the annotation held it, whoever had stopped renewing it."""

from __future__ import annotations

import logging

import pytest

from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import EXPIRY_MARGIN_S, Expiring, PowerCapAgent, Restore, expiring
from exporters.power_limits_before import LimitsBefore

W = 1000   # milliwatts
UNTIL = 1_700_000_900.0


class Clock:
    def __init__(self, now: float = UNTIL - 600.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Source:
    """What the node's annotation says now; `node` as `NodeAnnotationCaps` names it."""

    node = "n1"

    def __init__(self, caps: dict) -> None:
        self.caps = caps

    def read(self) -> dict:
        return dict(self.caps)


@pytest.fixture
def gpus() -> list[FakeDevice]:
    return [FakeDevice(uuid=f"GPU-{i}", minor=i, bus_id=f"00000000:{i:02x}:00.0") for i in range(2)]   # 700 W


def agent_for(gpus, caps: dict, clock: Clock, state=None) -> PowerCapAgent:
    return PowerCapAgent(Source(caps), NvmlBackend(FakeNvml(gpus)), LimitsBefore(state), clock=clock)


def test_a_cap_is_given_back_only_once_its_expiry_and_the_margin_have_passed(gpus, caplog):
    clock = Clock()
    agent = agent_for(gpus, {"GPU-0": Expiring(450.0, UNTIL), "GPU-1": 400.0}, clock)
    assert agent.sync() == {"GPU-0": 450.0, "GPU-1": 400.0}
    clock.now = UNTIL + EXPIRY_MARGIN_S   # the controller's clock may lag this node's by the margin
    assert agent.sync() == {} and agent.expired == set() and gpus[0].limit_mw == 450 * W
    clock.now += 1
    with caplog.at_level(logging.WARNING):
        assert agent.sync() == {"GPU-0": 700.0}
    assert agent.expired == {"GPU-0"} and agent.failed is None
    assert gpus[1].limit_mw == 400 * W   # a cap without expiry (an older controller's) never expires
    warning, = (r for r in caplog.records if r.levelno == logging.WARNING)
    assert all(s in warning.getMessage() for s in ("GPU-0", "node n1", "2023-11-14T22:28:20Z", "given back"))
    clock.now += 600
    assert agent.sync() == {} and agent.expired == set()   # given back, said and counted once


def test_a_renewed_cap_is_never_given_back_and_one_renewed_after_it_expired_is_applied_again(gpus):
    clock = Clock()
    agent = agent_for(gpus, {"GPU-0": Expiring(450.0, UNTIL)}, clock)
    agent.sync()
    agent.source = Source({"GPU-0": Expiring(450.0, UNTIL + 900)})   # the controller renews it
    clock.now = UNTIL + 600
    assert agent.sync() == {} and agent.expired == set() and gpus[0].limit_mw == 450 * W
    clock.now = UNTIL + 900 + EXPIRY_MARGIN_S + 1   # the controller stops renewing
    assert agent.sync() == {"GPU-0": 700.0} and agent.expired == {"GPU-0"}
    agent.source = Source({"GPU-0": Expiring(450.0, clock.now + 900)})   # back (a new leader), still wants it
    assert agent.sync() == {"GPU-0": 450.0} and gpus[0].limit_mw == 450 * W
    clock.now += 900 + EXPIRY_MARGIN_S + 1
    assert agent.sync() == {"GPU-0": 700.0} and agent.expired == {"GPU-0"}   # a second expiry is news again


def test_an_expired_cap_never_overrides_a_limit_set_by_hand(gpus):
    clock = Clock()
    agent = agent_for(gpus, {"GPU-0": Expiring(450.0, UNTIL)}, clock)
    agent.sync()
    gpus[0].limit_mw = 300 * W   # nvidia-smi -pl 300 while capped
    clock.now = UNTIL + EXPIRY_MARGIN_S + 1
    assert agent.sync() == {} and gpus[0].limit_mw == 300 * W and agent.expired == {"GPU-0"}


def test_a_cap_that_expired_while_no_agent_ran_is_given_back_to_the_limit_before_it(gpus, tmp_path):
    state = tmp_path / "limits.json"
    gpus[0].limit_mw = 500 * W   # the operator's limit before gputide's cap
    clock = Clock()
    agent_for(gpus, {"GPU-0": Expiring(450.0, UNTIL)}, clock, state).sync()
    assert gpus[0].limit_mw == 450 * W
    clock.now = UNTIL + 3600   # the agent restarts long after the controller died
    restarted = agent_for(gpus, {"GPU-0": Expiring(450.0, UNTIL)}, clock, state)
    assert restarted.sync() == {"GPU-0": 500.0} and restarted.expired == {"GPU-0"}


def test_only_plain_caps_are_made_to_expire():
    caps = {"GPU-0": 450.0, "GPU-1": Restore(400.0)}
    assert expiring(caps, UNTIL) == {"GPU-0": Expiring(450.0, UNTIL), "GPU-1": Restore(400.0)}
    assert expiring(caps, None) == caps   # no expiry written: caps as they are
