"""`gputide exporter --power-caps-file`: a path that can never be read exits 2 at start; a missing folder starts.

A folder there was 'unreadable' at every read, and a path under a file can never be written: both exit 2 before
the port is bound. A folder that does not exist yet is no error: /run/gputide (the README's example) is emptied at
every boot until the caps' writer makes it again, and ac5722d, which refused it, stopped the README's exporter on
every fresh host (audit a6). It starts with a warning, applies no caps while the file is missing, and applies them
once it is written there.
"""

from __future__ import annotations

import logging

import pytest

from balancer.cli import main
from balancer.cmd._args import watched_file
from balancer.errors import InputError

ALLOWED = ("a file path, not a folder, under folders this process can look in (the file and its folder need not "
           "exist yet)")
EXPORTER = ["exporter", "--backend", "sim", "--port", "0", "--listen", "127.0.0.1", "--duration", "0.1"]


@pytest.mark.parametrize(("where", "why"), [
    ("file/caps.json", "under a file, not a folder (file)"),
    ("file/deeper/caps.json", "under a file, not a folder (file)"), (".", "a folder"),
], ids=["under a file", "deeper under a file", "a folder"])
def test_a_caps_file_that_can_never_be_read_exits_2_at_start(tmp_path, capsys, where, why):
    (tmp_path / "file").write_text("")
    path = str(tmp_path / where) if where != "." else str(tmp_path)
    why = why.replace("(file)", f"({tmp_path / 'file'})")
    code = main(EXPORTER + ["--power-caps-file", path])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.err.strip() == (f"gputide: error: field '--power-caps-file': invalid value '{path}'; "
                                    f"allowed: {ALLOWED} ({why})"), captured.err
    assert "serving" not in captured.out   # refused before the port was bound


@pytest.mark.parametrize("where", ["run/gputide/power-caps.json", "caps.json"], ids=["missing folders", "no file"])
def test_a_caps_file_not_written_yet_is_accepted(tmp_path, where):
    path = str(tmp_path / where)
    assert watched_file(path, "--power-caps-file") == path


def test_the_exporter_starts_with_the_caps_folder_missing_and_says_so(tmp_path, capsys, caplog):
    """The README's `--power-caps-file /run/gputide/power-caps.json` on a host whose /run/gputide is not made yet."""
    path = tmp_path / "run" / "gputide" / "power-caps.json"
    with caplog.at_level(logging.WARNING, logger="gputide.exporter"):
        code = main(EXPORTER + ["--power-caps-file", str(path)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "serving" in captured.out
    assert [r.getMessage() for r in caplog.records if r.name == "gputide.exporter"] == [
        f"no folder for --power-caps-file {path} yet: no power caps are applied until it is written there"]


def test_a_folder_there_is_refused_by_the_check_itself(tmp_path):
    with pytest.raises(InputError) as info:
        watched_file(str(tmp_path), "--power-caps-file")
    assert (info.value.field, info.value.allowed) == ("--power-caps-file", ALLOWED)


def test_caps_written_later_in_a_folder_made_later_are_read(tmp_path):
    from exporters.power_caps import JsonFileCaps

    path = tmp_path / "run" / "gputide" / "power-caps.json"
    caps = JsonFileCaps(path)
    assert caps.read() == {}   # no caps, not 'unreadable': nothing to keep or give back yet
    path.parent.mkdir(parents=True)
    path.write_text('{"GPU-0": 300}')
    assert set(caps.read()) == {"GPU-0"}
