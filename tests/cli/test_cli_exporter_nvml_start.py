"""`gputide exporter --backend nvml`'s start without usable NVML, started as the power-cap agent's
(`exporters.backends.nvml.started`), through the command as a user runs it (audit of 53a9c42f):

* NVML unusable was said as "field '--backend': invalid value 'nvml'" whatever the cause, NoPermission included, as
  if the node had no driver: it is said after the exporter's own words as what is missing, with pynvml's error, and
  what to do (NoPermission: the GPU devices, /dev/nvidiactl and /dev/nvidia*), exit 2;
* every exception at the backend's start was bad input, exit 2: one that is no NVML error (a bug) is raised.

Audit a13 of 3a0847d6: Unknown (in a container, usually the GPU devices' access lost, NVIDIA/nvidia-docker#1730) was
said as a node without a driver, FunctionNotFound (a driver older than nvidia-ml-py) and LibRmVersionMismatch (the
kernel module not the library's) sent to "a GPU node whose NVIDIA driver is loaded", which it is: each names its cause
and what mends it.
"""

from __future__ import annotations

import pynvml
import pytest

from balancer.cli import main
from tests.cli.test_cli_run_inputs import one_error_line

EXPORTER = ["exporter", "--backend", "nvml", "--port", "0", "--duration", "0.1"]
LEAD = "gputide: error: exporter --backend nvml reads this machine's GPUs through NVML, which cannot be used on this " \
       "machine: "


def failing_init(monkeypatch, exc: Exception) -> None:
    def init() -> None:
        raise exc

    monkeypatch.setattr(pynvml, "nvmlInit", init)   # as on such a machine, whatever this one has


def test_no_libnvidia_ml_exits_2_naming_what_is_missing_not_an_invalid_backend(monkeypatch, capsys):
    failing_init(monkeypatch, pynvml.NVMLError_LibraryNotFound())
    assert main(EXPORTER) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"{LEAD}libnvidia-ml.so.1, NVML's library (the NVIDIA driver's), could not be loaded "
                           f"(pynvml: NVMLError_LibraryNotFound: {pynvml.NVMLError_LibraryNotFound()}); run it on a "
                           "GPU node whose NVIDIA driver is loaded"), line
    assert "'--backend'" not in line, line


def test_nvml_no_permission_is_said_as_device_access(monkeypatch, capsys):
    failing_init(monkeypatch, pynvml.NVMLError_NoPermission())
    assert main(EXPORTER) == 2
    line = one_error_line(capsys)
    assert line == (f"{LEAD}this process may not use the GPU devices (NVML answered 'Insufficient Permissions') "
                    f"(pynvml: NVMLError_NoPermission: {pynvml.NVMLError_NoPermission()}); give it the GPU devices, "
                    "/dev/nvidiactl and /dev/nvidia* (the NVIDIA container runtime with NVIDIA_VISIBLE_DEVICES=all), "
                    "as the exporter's DaemonSet does (deploy/base/exporter.yaml)"), line


def test_an_error_that_is_not_nvmls_is_raised_not_bad_input(monkeypatch):
    failing_init(monkeypatch, AttributeError("module 'pynvml' has no attribute 'nvmlInitWithFlags'"))   # a bug
    with pytest.raises(AttributeError, match="nvmlInitWithFlags"):
        main(EXPORTER)


DAEMONSET = ", as the exporter's DaemonSet does (deploy/base/exporter.yaml)"


@pytest.mark.parametrize(("error", "missing", "todo"), [
    (pynvml.NVMLError_Unknown, "NVML answered 'Unknown Error', in a container usually as it cannot open the GPU "
     "devices (access lost at a systemd daemon-reload, which a new container gets back: NVIDIA/nvidia-docker#1730)",
     "give it the GPU devices, /dev/nvidiactl and /dev/nvidia* (the NVIDIA container runtime with "
     f"NVIDIA_VISIBLE_DEVICES=all){DAEMONSET}"),
    (pynvml.NVMLError_FunctionNotFound, "the NVIDIA driver is older than the installed nvidia-ml-py expects (a "
     "function it calls is not in libnvidia-ml.so.1)", "upgrade the NVIDIA driver, or install an older nvidia-ml-py, "
     "no newer than the driver (its versions follow the driver's)"),
    (pynvml.NVMLError_LibRmVersionMismatch, "libnvidia-ml.so.1 does not match the NVIDIA kernel module loaded (the "
     "driver upgraded, its old module still in the kernel)", "reboot the node, or reload the NVIDIA kernel module once "
     "nothing uses the GPUs (a libnvidia-ml.so.1 in the image, not the node's: let the NVIDIA container runtime mount "
     "the node's)"),
], ids=["Unknown: device access", "FunctionNotFound: driver older", "LibRmVersionMismatch: reload the driver"])
def test_a_start_error_is_said_as_its_cause_and_what_mends_it(monkeypatch, capsys, error, missing, todo):
    failing_init(monkeypatch, error())
    assert main(EXPORTER) == 2
    line = one_error_line(capsys)
    assert line == f"{LEAD}{missing} (pynvml: {error.__name__}: {error()}); {todo}", line
