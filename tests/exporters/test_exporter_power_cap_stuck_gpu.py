"""`gputide exporter --power-caps-file` with a GPU whose read is stuck in NVML (a GPU in recovery): the power-cap
agent's power_limits() and apply_power_caps() called NVML on that GPU while holding the backend's lock, so the agent
hung too and every later collection waited on the lock for good (audit s32y2: three 503s). Now the agent leaves a
stuck GPU alone (its limit unread, its cap waiting or refused, not recorded as set, set once the read returns), and
a collection waits for the lock `lock_timeout_s` at most, then fails (`NvmlBusy`) rather than hang.

Every wait is bounded: a hung call waits at most `BOUND_S`, the threads here are joined with a timeout."""

from __future__ import annotations

import logging
import threading

from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend, NvmlBusy
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.power_caps import PowerCapAgent
from tests.exporters.test_exporter_nvml_gpu_hung import DEADLINE_S, ended

BOUND_S = 10.0
JOIN_S = 3.0


class HungDevice(FakeNvml):
    """Every call naming the GPU `hung` (a ``nvmlDevice...`` call on its handle) blocks until `release` is set (at
    most `BOUND_S`); `hang_on` narrows it to one call."""

    def __init__(self, devices: list[FakeDevice]) -> None:
        super().__init__(devices)
        self.hung: str | None = None
        self.hang_on: str | None = None
        self.release = threading.Event()

    def _dev(self, h, fn):
        if self.hung is not None and getattr(h, "target", h).uuid == self.hung and self.hang_on in (None, fn):
            self.release.wait(BOUND_S)
        return super()._dev(h, fn)


class Caps:
    def __init__(self, caps: dict[str, float]) -> None:
        self.caps = caps

    def read(self) -> dict[str, float]:
        return dict(self.caps)


def in_thread(fn) -> tuple[threading.Thread, dict]:
    """`fn()` in a daemon thread joined for `JOIN_S` at most: (the thread, {"result" or "error": ...})."""
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except Exception as exc:   # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(JOIN_S)
    return t, out


def lock_held(backend: NvmlBackend) -> tuple[threading.Thread, threading.Event]:
    """The backend's lock held by another thread until the event is set (at most `BOUND_S`): an agent's NVML call
    under it that does not return and is no GPU's (nvmlInit in a re-initialisation, say: a GPU's own calls run with
    a deadline, `test_exporter_power_cap_agent_first`)."""
    release, held = threading.Event(), threading.Event()

    def hold() -> None:
        with backend._lock:
            held.set()
            release.wait(BOUND_S)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    held.wait(BOUND_S)
    return t, release


def test_the_agent_leaves_a_gpu_whose_read_is_stuck_alone_and_caps_it_once_it_returns():
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(3)]
    nvml = HungDevice(devs)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    source = Caps({"GPU-0": 300, "GPU-2": 300})
    agent = PowerCapAgent(source, backend)
    backend.read()
    assert agent.sync() == {"GPU-0": 300.0, "GPU-2": 300.0}
    nvml.hung = "GPU-2"
    try:
        backend.read()   # GPU-2 late: its read stuck in NVML
        assert backend.reads.stuck() == ["GPU-2"]
        source.caps = {"GPU-0": 300, "GPU-1": 280, "GPU-2": 250}
        t, out = in_thread(agent.sync)
        assert not t.is_alive(), "the agent's sync hung on the stuck GPU, holding the backend's lock"
        assert out == {"result": {"GPU-1": 280.0}}
        assert "GPU-2" in agent.failed and "could not be read" in agent.failed   # capped: waits, no blind Set
        assert devs[2].limit_mw == 300_000   # not set, not recorded as set
        t, out = in_thread(agent.sync)
        assert out == {"result": {}} and "GPU-2" in agent.failed   # still waiting, nothing else to do
    finally:
        nvml.release.set()
    ended()
    backend.read()
    assert backend.reads.stuck() == []
    assert agent.sync() == {"GPU-2": 250.0} and agent.failed is None and devs[2].limit_mw == 250_000


def test_a_collection_waits_for_an_agent_call_that_does_not_return_at_most_lock_timeout_s(caplog):
    nvml = HungDevice([FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)])
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    backend.lock_timeout_s = 0.3
    backend.read()
    agent, release = lock_held(backend)
    try:
        with caplog.at_level(logging.ERROR, logger="exporters.backends.nvml"):
            for _ in range(2):
                t, out = in_thread(backend.read)
                assert not t.is_alive(), "the collection waited on the lock for good"
                assert isinstance(out.get("error"), NvmlBusy) and "power-cap agent" in str(out["error"])
        assert len([r for r in caplog.records if r.name == "exporters.backends.nvml"]) == 1   # said once
    finally:
        release.set()
    agent.join(BOUND_S)
    assert backend.read().values["DCGM_FI_DEV_GPU_TEMP"].tolist() == [45, 45]


def test_a_stuck_gpu_is_refused_by_apply_power_caps_without_a_call():
    nvml = HungDevice([FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)])
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    backend.read()
    nvml.hung = "GPU-1"
    try:
        backend.read()
        t, out = in_thread(lambda: backend.apply_power_caps({"GPU-0": 300, "GPU-1": 300}))
        assert not t.is_alive()
        err = out["error"]
        assert err.applied == {"GPU-0": 300.0} and "stuck" in err.refused["GPU-1"]
    finally:
        nvml.release.set()
    ended()
