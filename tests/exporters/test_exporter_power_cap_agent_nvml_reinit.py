"""The power-cap agent after NVML stops answering under it (shut down by another user of the library in the process,
the driver unloaded or reloaded). The agent never calls the backend's `read()`, the only place that initialised NVML
again, so it failed every sync until it was restarted. Now each sync's `power_limits()` tries once to initialise
NVML again (a failure is a failed sync, logged and counted), no limit is set while NVML does not answer, and a limit
is only ever set through a handle of the initialisation it was read under, found by UUID."""

from __future__ import annotations

import math
import threading

import pytest
from prometheus_client import CollectorRegistry

from balancer.cmd.power_cap_agent import AgentMetrics, sync_once
from exporters.backends.fake_nvml import FakeDevice, FakeHandle, FakeNvml, NVMLError_DriverNotLoaded
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import PowerCapAgent, PowerCapError, TargetUnavailable

W = 1000   # milliwatts
SET = "nvmlDeviceSetPowerManagementLimit"


class Caps:
    def __init__(self, caps: dict[str, float]) -> None:
        self.caps = caps

    def read(self) -> dict[str, float]:
        return dict(self.caps)


class Node:
    def __init__(self, caps: dict[str, float]) -> None:
        self.devs = [FakeDevice(uuid="GPU-0", minor=0), FakeDevice(uuid="GPU-1", minor=1, bus_id="00000000:2A:00.0")]
        self.nvml = FakeNvml(self.devs)
        self.backend = NvmlBackend(self.nvml, hostname="n1")
        self.source = Caps(caps)
        self.agent = PowerCapAgent(self.source, self.backend)
        self.registry = CollectorRegistry()
        self.metrics = AgentMetrics(self.registry)

    def sync(self) -> dict[str, float]:
        return sync_once(self.agent, self.metrics)

    def syncs(self, result: str) -> float:
        return self.registry.get_sample_value("gputide_power_cap_agent_syncs_total", {"result": result})

    def inits(self) -> int:
        return self.nvml.calls.count("nvmlInit")


def test_nvml_shut_down_under_the_agent_is_initialised_again_at_its_next_sync():
    node = Node({"GPU-0": 300.0})
    assert node.sync() == {"GPU-0": 300.0}
    node.nvml.nvmlShutdown()   # another user of the library in this process, once too often
    node.source.caps["GPU-1"] = 400.0
    assert node.sync() == {} and node.syncs("failed") == 1   # found down: nothing set on a dead initialisation
    assert node.sync() == {"GPU-1": 400.0}   # was failed until the agent restarted
    assert node.devs[1].limit_mw == 400 * W
    assert node.backend.nvml_reinits == 1 and node.nvml.refs == 1
    assert all(isinstance(h, FakeHandle) and h.generation == 1 for h in node.backend.handles)
    assert node.agent.failed is None and node.metrics.failure is None


def test_while_the_driver_does_not_answer_each_sync_tries_nvml_init_once_and_sets_nothing(caplog):
    node = Node({"GPU-0": 300.0})
    node.sync()
    node.nvml.broken = NVMLError_DriverNotLoaded
    node.source.caps["GPU-0"] = 250.0
    for attempt in range(3):
        before, sets = node.inits(), node.nvml.calls.count(SET)
        assert node.sync() == {}
        assert node.inits() - before == (0 if attempt == 0 else 1)   # found down, then one attempt per sync
        assert node.nvml.calls.count(SET) == sets   # nothing tried through a handle of the lost initialisation
    assert node.syncs("failed") == 3 and node.backend.nvml_reinit_failures == 2
    assert sum("power caps sync failed" in r.getMessage() for r in caplog.records) == 1   # once per reason
    node.devs[0].limit_mw = node.devs[0].default_limit_mw   # the reload put the board's default back
    node.nvml.broken = None
    assert node.sync() == {"GPU-0": 250.0}
    assert node.devs[0].limit_mw == 250 * W and node.syncs("applied") == 2
    assert node.agent.before.get("GPU-0").before_w == 700.0   # the limit before gputide's cap is still the default
    assert node.registry.get_sample_value("gputide_power_cap_agent_caps_lost_total", {"UUID": "GPU-0"}) == 1


def test_after_a_reload_a_limit_is_set_on_the_gpu_of_that_uuid_wherever_nvml_now_counts_it():
    node = Node({"GPU-1": 300.0})
    node.sync()
    node.nvml.nvmlShutdown()
    node.sync()
    node.nvml.devices = [node.devs[1], node.devs[0]]   # GPU-1 is NVML's index 0 at the next initialisation
    node.source.caps["GPU-1"] = 280.0
    assert node.sync() == {"GPU-1": 280.0}
    assert node.devs[1].limit_mw == 280 * W and node.devs[0].limit_mw == 700 * W


def test_a_gpu_nvml_no_longer_names_after_a_reload_is_no_gpu_of_the_node_for_the_agent():
    node = Node({"GPU-0": 300.0, "GPU-1": 300.0})
    node.sync()
    node.nvml.broken = NVMLError_DriverNotLoaded
    node.sync()
    node.nvml.broken, node.nvml.devices = None, [node.devs[1]]
    node.source.caps.update({"GPU-0": 250.0, "GPU-1": 250.0})
    assert node.sync() == {"GPU-1": 250.0}   # GPU-0's entry ignored (logged once), as for a GPU replaced
    assert set(node.backend.power_limits()) == {"GPU-1"}


def test_a_gpu_found_after_a_reload_can_be_capped():
    node = Node({})
    node.sync()
    node.nvml.broken = NVMLError_DriverNotLoaded
    node.sync()
    node.nvml.broken = None
    new = FakeDevice(uuid="GPU-2", minor=2, bus_id="00000000:3B:00.0")
    node.nvml.devices = [*node.devs, new]
    node.source.caps["GPU-2"] = 350.0
    assert node.sync() == {"GPU-2": 350.0} and new.limit_mw == 350 * W


def test_the_backend_refuses_every_cap_while_nvml_does_not_answer():
    node = Node({})
    node.nvml.nvmlShutdown()
    with pytest.raises(TargetUnavailable, match="NVMLError_Uninitialized"):
        node.backend.power_limits()
    with pytest.raises(PowerCapError) as err:
        node.backend.apply_power_caps({"GPU-0": 300.0, "GPU-1": 300.0})
    assert err.value.applied == {} and set(err.value.refused) == {"GPU-0", "GPU-1"}
    assert node.nvml.calls.count("nvmlInit") == 1   # only power_limits() initialises again; apply never does
    assert math.isfinite(node.backend.power_limits()["GPU-0"].current_w)


def test_caps_judged_on_limits_read_before_nvml_was_initialised_again_are_not_set():
    node = Node({})
    assert node.backend.power_limits()["GPU-0"].current_w == 700.0
    node.nvml.nvmlShutdown()
    node.backend.read()   # a collection finds NVML down (`gputide exporter --power-caps-file`)
    node.backend.read()   # and the next initialises it again, between the agent's read of the limits and its apply
    with pytest.raises(PowerCapError, match="initialised again since the power limits were read"):
        node.backend.apply_power_caps({"GPU-0": 300.0})
    assert node.devs[0].limit_mw == 700 * W
    node.backend.power_limits()
    assert node.backend.apply_power_caps({"GPU-0": 300.0}) == {"GPU-0": 300.0}


def test_nvml_stopping_between_two_gpus_refuses_the_rest_and_the_next_sync_recovers():
    node = Node({"GPU-0": 300.0, "GPU-1": 300.0})
    real = node.nvml.nvmlDeviceSetPowerManagementLimit

    def set_then_unload(h, mw):
        real(h, mw)
        node.nvml.broken = NVMLError_DriverNotLoaded   # the driver unloaded right after the first GPU's

    node.nvml.nvmlDeviceSetPowerManagementLimit = set_then_unload
    assert node.sync() == {"GPU-0": 300.0} and node.syncs("failed") == 1
    assert node.devs[1].limit_mw == 700 * W   # GPU-1 not set
    node.nvml.nvmlDeviceSetPowerManagementLimit = real
    node.nvml.broken = None
    assert node.sync() == {"GPU-1": 300.0}
    assert node.backend.nvml_reinits == 1


def test_the_exporters_read_and_the_agent_share_one_reinitialisation():
    node = Node({"GPU-0": 300.0})
    node.sync()
    node.nvml.nvmlShutdown()
    node.backend.read()   # found down
    node.backend.read()   # initialised again
    before = node.inits()
    node.source.caps["GPU-0"] = 250.0
    assert node.sync() == {"GPU-0": 250.0} and node.inits() == before


def test_the_agent_waits_for_a_collection_in_flight_rather_than_share_nvml_with_it():
    """`gputide exporter --power-caps-file`: the agent's sync and a collection run in two threads on one backend; a
    re-initialisation by either would replace the handles the other is using mid-call."""
    node = Node({"GPU-0": 300.0})
    inside, release = threading.Event(), threading.Event()
    real = node.nvml.nvmlDeviceGetTemperature

    def slow(h, sensor):
        inside.set()
        release.wait(5)
        return real(h, sensor)

    node.nvml.nvmlDeviceGetTemperature = slow
    reading = threading.Thread(target=node.backend.read)
    reading.start()
    assert inside.wait(5)
    syncing = threading.Thread(target=node.sync)
    syncing.start()
    syncing.join(0.2)
    assert syncing.is_alive() and node.devs[0].limit_mw == 700 * W   # waits for the read
    release.set()
    reading.join(5)
    syncing.join(5)
    assert node.devs[0].limit_mw == 300 * W
