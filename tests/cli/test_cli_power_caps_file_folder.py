"""`gputide exporter --power-caps-file` in a folder that does not exist, or naming a folder, exits 2 at start.

Before: the exporter started and served (exit 0 at the end of its --duration), reading the file at every interval
as no caps at all: a caps file can never be written in a missing folder where the agent looks, so every cap
written for it (a typo, a volume not mounted) was silently never applied; a folder there was 'unreadable' at
every read. A file not written yet, in a folder that exists, still starts (tests/exporters).
"""

from __future__ import annotations

import pytest

from balancer.cli import main

ALLOWED = "a file path in an existing folder this process can look in (the file itself need not exist)"


@pytest.mark.parametrize(("where", "why"), [
    ("nope/caps.json", "no such folder"), ("file/caps.json", "under a file, not a folder"), (".", "a folder"),
], ids=["missing folder", "under a file", "a folder"])
def test_a_caps_file_that_can_never_be_read_exits_2_at_start(tmp_path, capsys, where, why):
    (tmp_path / "file").write_text("")
    path = str(tmp_path / where) if where != "." else str(tmp_path)
    code = main(["exporter", "--backend", "sim", "--port", "0", "--listen", "127.0.0.1", "--duration", "0.1",
                 "--power-caps-file", path])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.err.strip() == (f"gputide: error: field '--power-caps-file': invalid value '{path}'; "
                                    f"allowed: {ALLOWED} ({why})"), captured.err
    assert "serving" not in captured.out   # refused before the port was bound
