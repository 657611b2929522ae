"""An output file this process cannot create exits 2 naming the flag before any work, not a traceback after it.

Before, `--json` (place, forecast backtest, calibrate) only checked that the folder existed: a folder this
process cannot write in ran the whole replay or backtest, then raised PermissionError.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from balancer.cli import main

UNWRITABLE = Path("/sys")   # sysfs: no regular file can be created there, not even by root


def _cannot_create() -> bool:
    try:
        with tempfile.NamedTemporaryFile(dir=UNWRITABLE):
            return False
    except OSError:
        return True


pytestmark = pytest.mark.skipif(not UNWRITABLE.is_dir() or not _cannot_create(), reason="no unwritable folder here")

FILES = {
    "nodes.csv": "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,1024,2,T4\n",
    "pods.csv": "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,500\n",
    "trace.csv": "timestamp,value\n" + "".join(f"{600 * i},{1 + i % 5}\n" for i in range(300)),
    "calib.csv": "timestamp,demand_rps,replicas,p99_s\n0,1,1,0.2\n60,1,1,0.2\n",
}


@pytest.mark.parametrize("argv, flag", [
    pytest.param(["place", "--nodes", "{tmp}/nodes.csv", "--pods", "{tmp}/pods.csv", "--policy", "bestfit",
                  "--seeds", "1", "--json"], "--json", id="place"),
    pytest.param(["forecast", "backtest", "--trace", "{tmp}/trace.csv", "--models", "persistence", "--horizons", "1h",
                  "--min-train-days", "0.1", "--json"], "--json", id="forecast backtest"),
    pytest.param(["calibrate", "--csv", "{tmp}/calib.csv", "--service", "chat", "--slo", "0.5", "--json"], "--json",
                 id="calibrate"),
])
def test_an_output_file_in_a_folder_this_process_cannot_write_exits_2(tmp_path, capsys, argv, flag):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    target = str(UNWRITABLE / "gputide-out.json")
    code = main([a.replace("{tmp}", str(tmp_path)) for a in argv] + [target])
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith(f"gputide: error: field '{flag}': invalid value '{target}'; allowed: "), lines
    assert captured.out == ""
