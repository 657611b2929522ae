"""Two first caps the agent asks knowing it may not give the GPU back to the limit an operator wants, logged at WARNING.

A first cap whose record the state file could not take (a full disk) is asked anyway: a hot GPU is capped first. An
agent restarted before a later write succeeds finds the GPU at that cap with nothing written down, takes it for an
operator's (`_found_in_force`) and leaves it on when it is given back: a trade accepted, warned of once per GPU until
the file is written (was: nothing said). Without a state file (the exporter's ``--power-caps-file`` agent) a GPU found
at the cap asked, under its default, is capped as any other and its give-back restores the default, an operator's
``nvidia-smi -pl`` at those watts included: said again (92bb72af had dropped the warning, 89dfb57d the behaviour back
without it). Fake NVML, Sets allowed."""

from __future__ import annotations

import logging

from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import PowerCapAgent
from exporters.power_limits_before import LimitsBefore

W = 1000   # milliwatts
UNRECORDED = "the state file could not record it"
NO_STATE = "no limit before it is known (no state file"


class Caps(dict):
    """The source: the caps it holds, as `ask` last set them."""

    def ask(self, caps):
        self.clear()
        self.update(caps)

    def read(self):
        return dict(self)


def _warnings(caplog, words):
    return [r for r in caplog.records if r.levelno == logging.WARNING and words in r.getMessage()]


def _full_disk(tmp_path):
    """A state file no write reaches (its folder is a file), and what makes it writable again."""
    (blocker := tmp_path / "disk").write_text("")
    return blocker / "before.json", blocker.unlink


def test_a_first_cap_asked_unrecorded_is_warned_of_once_until_the_file_is_written(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="exporters.power_caps")
    hot, other = (FakeDevice(uuid=u, limit_mw=700 * W, default_limit_mw=700 * W) for u in ("GPU-0", "GPU-1"))
    (state, freed), source = _full_disk(tmp_path), Caps({"GPU-0": 300.0})
    agent = PowerCapAgent(source, NvmlBackend(FakeNvml([hot, other])), LimitsBefore(state))
    agent.sync()
    assert hot.limit_mw == 300 * W and "could not be written" in agent.failed   # capped anyway: thermal safety
    (warned,) = _warnings(caplog, UNRECORDED)
    assert "GPU-0" in warned.getMessage() and "300 W" in warned.getMessage() and "leaves it on" in warned.getMessage()
    source.ask({})   # given back and capped again, the file still unwritten: once per GPU, not warned again
    agent.sync()
    assert hot.limit_mw == 700 * W
    source.ask({"GPU-0": 250.0})
    agent.sync()
    assert hot.limit_mw == 250 * W and "could not be written" in agent.failed
    assert len(_warnings(caplog, UNRECORDED)) == 1

    freed()
    agent.sync()   # the file written whole
    assert agent.failed is None and state.exists() and len(_warnings(caplog, UNRECORDED)) == 1
    source.ask({"GPU-0": 250.0, "GPU-1": 300.0})   # a first cap recorded: nothing to warn of
    agent.sync()
    assert other.limit_mw == 300 * W and len(_warnings(caplog, UNRECORDED)) == 1


def test_the_trade_warned_of_a_restart_before_the_write_leaves_the_cap_on(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="exporters.power_caps")
    gpu = FakeDevice(uuid="GPU-0", limit_mw=700 * W, default_limit_mw=700 * W)
    nvml, (state, freed), source = FakeNvml([gpu]), _full_disk(tmp_path), Caps({"GPU-0": 300.0})
    PowerCapAgent(source, NvmlBackend(nvml), LimitsBefore(state)).sync()
    assert gpu.limit_mw == 300 * W and len(_warnings(caplog, UNRECORDED)) == 1
    freed()
    restarted = PowerCapAgent(source, NvmlBackend(nvml), LimitsBefore(state))   # before any write succeeded
    restarted.sync()
    source.ask({})
    restarted.sync()
    assert gpu.limit_mw == 300 * W   # accepted: left on, as the warning said


def test_without_a_state_file_a_gpu_found_at_the_cap_is_warned_of(caplog):
    caplog.set_level(logging.WARNING, logger="exporters.power_caps")
    capped = FakeDevice(uuid="GPU-0", limit_mw=200 * W, default_limit_mw=700 * W)   # own cap, or an operator's -pl
    at_default = FakeDevice(uuid="GPU-1", limit_mw=700 * W, default_limit_mw=700 * W)
    source = Caps({"GPU-0": 200.0, "GPU-1": 800.0})
    agent = PowerCapAgent(source, NvmlBackend(FakeNvml([capped, at_default])))
    agent.sync()
    (warned,) = _warnings(caplog, NO_STATE)   # none for GPU-1: at its default, nothing to give back
    assert "GPU-0" in warned.getMessage() and "give-back restores the default" in warned.getMessage()
    agent.sync()   # carried out: not warned again
    assert len(_warnings(caplog, NO_STATE)) == 1
    source.ask({})
    agent.sync()
    assert capped.limit_mw == 700 * W and agent.failed is None
