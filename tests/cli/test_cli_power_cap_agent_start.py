"""`gputide power-cap-agent`'s start-up checks (CLI audit of session 38), through the command as a user runs it:

* on a machine without NVML it said "field '--backend': invalid value 'nvml'", the exporter's words for a flag the
  agent does not have; it names NVML, libnvidia-ml.so.1 and pynvml's error (exit 2, as the exporter's start without
  NVML);
* `--state-file` naming a folder, or a file in a folder missing or read-only, was taken: every write of the limits
  before gputide's caps failed once a GPU was capped. It is refused at start, exit 2, naming the flag, the value and
  what is allowed, before NVML is touched.
"""

from __future__ import annotations

import os
from pathlib import Path

import pynvml
import pytest
import yaml

from balancer.cli import main
from exporters.backends import nvml as nvml_mod
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


def refused_nvml(monkeypatch) -> None:
    def touched(**_kw):
        raise AssertionError("NVML touched before --state-file was checked")

    monkeypatch.setattr(nvml_mod, "NvmlBackend", touched)


ALLOWED = "a file path in an existing folder this process can write in (the file itself need not exist)"


@pytest.mark.parametrize(("where", "why"), [
    ("", "a folder"),
    ("missing/limits.json", "no such folder"),
    ("a-file/limits.json", "under a file, not a folder"),
], ids=["a folder", "its folder missing", "under a file"])
def test_an_unusable_state_file_exits_2_before_nvml(monkeypatch, capsys, tmp_path, agent, where, why):
    refused_nvml(monkeypatch)
    (tmp_path / "a-file").write_text("")
    path = str(tmp_path / where) if where else str(tmp_path)
    assert main([*agent, "--state-file", path]) == 2
    line = one_error_line(capsys)
    assert line == f"gputide: error: field '--state-file': invalid value {path!r}; allowed: {ALLOWED} ({why})", line


def test_a_state_file_in_a_folder_it_cannot_write_in_exits_2_before_nvml(monkeypatch, capsys, tmp_path, agent):
    refused_nvml(monkeypatch)
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    if os.geteuid() == 0:   # root writes in a folder of mode 0555: sysfs takes no file, not even root's
        folder = Path("/sys")
    try:
        assert main([*agent, "--state-file", str(folder / "limits.json")]) == 2
    finally:
        (tmp_path / "ro").chmod(0o755)
    line = one_error_line(capsys)
    assert f"field '--state-file': invalid value '{folder / 'limits.json'}'; allowed: {ALLOWED}" in line, line
    assert "(Permission denied)" in line or "(Read-only file system)" in line, line
