"""A `gputide simulate` that stops part-way leaves no summary.json claiming the run finished.

Before, the run emptied audit.jsonl at its start and wrote summary.json first at its end: stopped by Ctrl-C (or
an error) over a folder of an earlier run, the folder held that run's summary.json and timeseries.csv beside
the new, partial audit, and read as a finished run.
"""

from __future__ import annotations

import json

from balancer.cli import main
from balancer.sim import SimCluster


def test_a_simulation_stopped_part_way_leaves_no_earlier_summary(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    argv = ["simulate", "--scenario", "hotspot", "--policy", "none", "--days", "0.01", "--no-plots", "--out", str(out)]
    assert main(argv) == 0
    assert json.loads((out / "summary.json").read_text())["policy"] == "none"
    capsys.readouterr()

    steps = 0
    real_step = SimCluster.step

    def interrupted(self, dt=None):
        nonlocal steps
        steps += 1
        if steps > 3:
            raise KeyboardInterrupt
        return real_step(self, dt)

    monkeypatch.setattr(SimCluster, "step", interrupted)
    assert main(argv) == 130
    assert not (out / "summary.json").exists() and not (out / "timeseries.csv").exists()
