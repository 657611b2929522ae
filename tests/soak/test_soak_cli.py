"""`gputide soak` refuses bad arguments with exit code 2 and a message naming the flag (no Prometheus needed)."""

from __future__ import annotations

import pytest

from balancer.cli import main


@pytest.mark.parametrize("argv, flag", [
    (["soak", "--days", "0"], "--days"),
    (["soak", "--days", "-3"], "--days"),
    (["soak", "--gpus", "4"], "--gpus"),
    (["soak", "--short", "--fault-every-hours", "0.1"], "--fault-every-hours"),
    (["soak", "--minutes-per-cycle", "0"], "--minutes-per-cycle"),
], ids=["zero days", "negative days", "too few GPUs", "faults too often", "zero minutes per cycle"])
def test_bad_arguments_exit_2_naming_the_flag(argv, flag, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert flag in err and "allowed" in err
    assert not (tmp_path / "soak-summary.json").exists()
