"""`gputide power-cap-agent`'s start-up checks (CLI audit of session 38), through the command as a user runs it:

* on a machine without NVML it said "field '--backend': invalid value 'nvml'", the exporter's words for a flag the
  agent does not have; it names NVML, libnvidia-ml.so.1 and pynvml's error (exit 2, as the exporter's start without
  NVML);
* NVML's NoPermission (at its start, or listing the GPUs once it started) is said as device access (root with
  CAP_SYS_ADMIN, /dev/nvidia*), not as a node without a driver; an error that is no NVML error (a bug) is raised,
  not exit 2 "bad input";
* `--state-file` naming a folder, a file under a file, or one whose folder (or nearest existing folder, the folder
  missing) this process cannot write in, was taken: every write of the limits before gputide's caps failed once a
  GPU was capped. It is refused at start, exit 2, naming the flag, the value and what is allowed, before NVML is
  touched. A missing folder is not refused: each write creates it (`LimitsBefore._save`), so
  `--state-file /var/lib/gputide/power-cap-agent/limits.json` on a bare host works.

Audit a13 of 53a9c42f/3a0847d6: a folder that is a link whose target is missing (`/var/lib/gputide ->
/mnt/not-mounted/gputide`) was taken as missing (the check went on to the link's folder), and each write then failed
(FileExistsError creating the folders): refused, naming the link. NVML's Unknown at start (in a container, usually the
devices' access lost) is said as device access; an NVML error after nvmlInit succeeded left NVML initialised: it is
shut down.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pynvml
import pytest
import yaml

from balancer.actuate import k8s_nodes
from balancer.cli import main
from balancer.cmd import power_cap_agent
from exporters.backends import nvml as nvml_mod
from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from tests.cli.test_cli_run_inputs import KUBECONFIG, one_error_line


@pytest.fixture
def agent(tmp_path) -> list[str]:
    kc = tmp_path / "kc.yaml"
    kc.write_text(yaml.safe_dump(KUBECONFIG))   # nothing answers there: the agent never gets as far as a read
    return ["power-cap-agent", "--node", "n1", "--once", "--port", "0", "--kubeconfig", str(kc)]


@pytest.mark.parametrize(("error", "missing"), [
    (pynvml.NVMLError_LibraryNotFound, "libnvidia-ml.so.1, NVML's library (the NVIDIA driver's), could not be loaded"),
    (pynvml.NVMLError_DriverNotLoaded, "the NVIDIA driver is not loaded, though libnvidia-ml.so.1 was found"),
], ids=["no libnvidia-ml", "no driver"])
def test_no_nvml_exits_2_naming_nvml_and_pynvmls_error_not_a_flag(monkeypatch, capsys, agent, error, missing):
    def init() -> None:
        raise error()

    monkeypatch.setattr(pynvml, "nvmlInit", init)   # as on a machine without it, whatever this one has
    assert main(agent) == 2
    line = one_error_line(capsys)
    assert line.startswith("gputide: error: power-cap-agent applies the caps through NVML, which cannot be used on "
                           f"this machine: {missing} (pynvml: {error.__name__}: {error()})"), line
    assert "run it on a GPU node whose NVIDIA driver is loaded" in line, line
    assert "--backend" not in line, line


DEVICES = "give it the GPU devices, /dev/nvidiactl and /dev/nvidia*"


def test_nvml_no_permission_at_start_is_said_as_device_access(monkeypatch, capsys, agent):
    def init() -> None:
        raise pynvml.NVMLError_NoPermission()

    monkeypatch.setattr(pynvml, "nvmlInit", init)
    assert main(agent) == 2
    line = one_error_line(capsys)
    assert "this process may not use the GPU devices (NVML answered 'Insufficient Permissions') (pynvml: " \
           f"NVMLError_NoPermission: {pynvml.NVMLError_NoPermission()}); {DEVICES}" in line, line
    assert "root with CAP_SYS_ADMIN" in line, line
    assert "driver is loaded" not in line and "did not initialise" not in line, line


def test_nvml_no_permission_listing_the_gpus_is_not_said_as_nvml_not_initialised(monkeypatch, capsys, agent):
    def no_permission() -> int:
        raise pynvml.NVMLError_NoPermission()

    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)   # NVML started: the GPUs' count is what it refuses
    monkeypatch.setattr(pynvml, "nvmlSystemGetDriverVersion", lambda: "550.54.15")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", no_permission)
    assert main(agent) == 2
    line = one_error_line(capsys)
    assert "this process may not use the GPU devices" in line and DEVICES in line, line
    assert "driver is loaded" not in line and "did not initialise" not in line, line


def test_nvml_unknown_at_start_is_said_as_device_access(monkeypatch, capsys, agent):
    def init() -> None:
        raise pynvml.NVMLError_Unknown()   # a container whose device access a systemd daemon-reload took

    monkeypatch.setattr(pynvml, "nvmlInit", init)
    assert main(agent) == 2
    line = one_error_line(capsys)
    assert "NVML answered 'Unknown Error', in a container usually as it cannot open the GPU devices (access lost at " \
           "a systemd daemon-reload, which a new container gets back: NVIDIA/nvidia-docker#1730) (pynvml: " \
           f"NVMLError_Unknown: {pynvml.NVMLError_Unknown()}); {DEVICES}" in line, line
    assert "root with CAP_SYS_ADMIN" in line, line
    assert "driver is loaded" not in line, line


def test_nvml_is_shut_down_when_its_start_fails_after_nvml_init(monkeypatch, capsys, agent):
    calls: list[str] = []

    def no_permission() -> int:
        raise pynvml.NVMLError_NoPermission()

    monkeypatch.setattr(pynvml, "nvmlInit", lambda: calls.append("nvmlInit"))
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: calls.append("nvmlShutdown"))
    monkeypatch.setattr(pynvml, "nvmlSystemGetDriverVersion", lambda: "550.54.15")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", no_permission)
    assert main(agent) == 2
    assert "this process may not use the GPU devices" in one_error_line(capsys)
    assert calls == ["nvmlInit", "nvmlShutdown"]


def test_no_pynvml_says_what_to_install_not_a_gpu_node(monkeypatch, capsys, agent):
    monkeypatch.setitem(sys.modules, "pynvml", None)   # `import pynvml` raises ModuleNotFoundError
    assert main(agent) == 2
    line = one_error_line(capsys)
    assert "pynvml, NVML's Python binding (nvidia-ml-py), is not installed (pynvml: ModuleNotFoundError: " in line
    assert line.endswith("; install nvidia-ml-py (gputide's image has it)"), line


def test_an_error_that_is_not_nvmls_is_raised_not_bad_input(monkeypatch, agent):
    def init() -> None:
        raise AttributeError("module 'pynvml' has no attribute 'nvmlInitWithFlags'")   # a bug, not the machine

    monkeypatch.setattr(pynvml, "nvmlInit", init)
    with pytest.raises(AttributeError, match="nvmlInitWithFlags"):
        main(agent)


def refused_nvml(monkeypatch) -> None:
    def touched(**_kw):
        raise AssertionError("NVML touched before --state-file was checked")

    monkeypatch.setattr(nvml_mod, "NvmlBackend", touched)


ALLOWED = ("a file path, not a folder, whose folder this process can write in or, where that folder is missing, "
           "whose nearest existing folder it can (each write creates the folders missing; the file itself need not "
           "exist)")


@pytest.mark.parametrize(("where", "why"), [
    ("", "a folder"),
    ("a-file/limits.json", "under a file, not a folder: {tmp}/a-file"),
    ("a-file/deeper/limits.json", "under a file, not a folder: {tmp}/a-file"),
], ids=["a folder", "under a file", "under a file, its folder missing"])
def test_an_unusable_state_file_exits_2_before_nvml(monkeypatch, capsys, tmp_path, agent, where, why):
    refused_nvml(monkeypatch)
    (tmp_path / "a-file").write_text("")
    path = str(tmp_path / where) if where else str(tmp_path)
    assert main([*agent, "--state-file", path]) == 2
    line = one_error_line(capsys)
    assert line == f"gputide: error: field '--state-file': invalid value {path!r}; allowed: {ALLOWED} " \
                   f"({why.format(tmp=tmp_path)})", line


def unwritable(tmp_path) -> Path:
    """A folder this process cannot write in: mode 0555, or sysfs for root (it writes in a folder of mode 0555;
    sysfs takes no file, not even root's)."""
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    return Path("/sys") if os.geteuid() == 0 else folder


@pytest.mark.parametrize(("under", "where"), [
    ("", ""),
    ("missing/deeper", " in {folder}, the nearest folder that exists"),
], ids=["its folder", "its nearest existing folder, its folder missing"])
def test_a_state_file_in_a_folder_it_cannot_write_in_exits_2_before_nvml(monkeypatch, capsys, tmp_path, agent,
                                                                          under, where):
    refused_nvml(monkeypatch)
    folder = unwritable(tmp_path)
    path = folder / under / "limits.json"
    try:
        assert main([*agent, "--state-file", str(path)]) == 2
    finally:
        (tmp_path / "ro").chmod(0o755)
    line = one_error_line(capsys)
    assert f"field '--state-file': invalid value '{path}'; allowed: {ALLOWED}" in line, line
    assert any(line.endswith(f"({why}{where.format(folder=folder)})")
               for why in ("Permission denied", "Read-only file system")), line


@pytest.mark.parametrize("under", ["", "power-cap-agent"], ids=["its folder", "a folder above it"])
def test_a_state_file_under_a_link_whose_target_is_missing_exits_2_naming_the_link(monkeypatch, capsys, tmp_path,
                                                                                   agent, under):
    """`/var/lib/gputide -> /mnt/not-mounted/gputide`: the folder is there, a link to nothing, which no write makes
    (creating the folders meets the link: FileExistsError); it was taken, the nearest existing folder sought above."""
    refused_nvml(monkeypatch)
    link = tmp_path / "gputide"
    link.symlink_to(tmp_path / "not-mounted" / "gputide")
    path = link / under / "limits.json"
    assert main([*agent, "--state-file", str(path)]) == 2
    line = one_error_line(capsys)
    assert line == f"gputide: error: field '--state-file': invalid value '{path}'; allowed: {ALLOWED} (under a link " \
                   f"whose target is missing: {link} -> {tmp_path}/not-mounted/gputide)", line


class Asked:
    """The node's caps as `NodeAnnotationCaps` reads them (no API server in this test)."""

    def __init__(self, _api, _node: str) -> None:
        self.api = None

    def read(self) -> dict[str, float]:
        return {"GPU-0": 450.0}


def test_a_state_file_whose_folders_are_missing_is_taken_and_its_first_write_makes_them(monkeypatch, tmp_path, agent):
    """A bare host: /var/lib/gputide/power-cap-agent is made by the first write (the DaemonSet's hostPath makes it
    too), as the limits before gputide's caps are saved (`LimitsBefore._save`). It was refused at start, exit 2."""
    gpu = FakeDevice(uuid="GPU-0")
    monkeypatch.setattr(power_cap_agent, "nvml_backend", lambda: nvml_mod.NvmlBackend(FakeNvml([gpu])))
    monkeypatch.setattr(k8s_nodes, "NodeAnnotationCaps", Asked)
    path = tmp_path / "var" / "lib" / "gputide" / "power-cap-agent" / "limits.json"
    assert main([*agent, "--state-file", str(path)]) == 0
    assert gpu.limit_mw == 450_000
    assert json.loads(path.read_text()) == {"GPU-0": {"before_w": 700.0, "set_w": 450.0}}
