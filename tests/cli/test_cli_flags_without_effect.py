"""A flag given where nothing reads it is refused at start (exit 2), naming the flag, the value and what it needs
(audit s38): `simulate --policy none --policy-file F` ran without the file, `place --max-moves 5` without --defrag
made no move, `exporter --caps-interval 1` without --power-caps-file read no file, and `exporter --backend nvml
--speed 600` (or `--seed 3`) served this machine's GPUs at their own pace, each exiting 0 without a word.

"Given" is given on the command line: the flag's default value written out (`--caps-interval 10`) is refused too,
as calibrate refuses its Prometheus-only flags; left out, each flag keeps its default.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from balancer.cli import main
from tests.cli.test_cli_run_inputs import one_error_line

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,8,V100M16\nn1,32000,262144,2,T4\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,1000,1,500,\np1,1000,1000,8,1000,\n"
SIM = ["exporter", "--backend", "sim", "--port", "0", "--duration", "0.1"]
NVML = ["exporter", "--backend", "nvml", "--port", "0", "--duration", "0.1"]


def _refused(capsys, argv: list[str], flag: str, value: str, needs: str) -> None:
    code = main(argv)
    line = one_error_line(capsys)
    assert code == 2, line
    assert line.startswith(f"gputide: error: field '{flag}': invalid value {value}; allowed: only with {needs}"), line


@pytest.mark.parametrize(("scenario", "policy"), [("hotspot", "none"), ("tidal", "none"), ("tidal", "static"),
                                                ("tidal", "reactive")])
def test_simulate_refuses_a_policy_file_its_policy_never_reads(tmp_path, capsys, scenario, policy):
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\nspec: {}\n")
    _refused(capsys, ["simulate", "--scenario", scenario, "--policy", policy, "--days", "0.01", "--no-plots",
                      "--policy-file", str(policy_file), "--out", str(tmp_path / "out")],
             "--policy-file", repr(str(policy_file)), "--policy gputide")
    assert not (tmp_path / "out" / "summary.json").exists()   # refused before the run


def _place(tmp_path, *extra: str) -> list[str]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    return ["place", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
            "--policy", "gputide", "--seeds", "1", *extra]


@pytest.mark.parametrize("moves", ["5", "2"])   # 2: the default, written out
def test_place_refuses_max_moves_without_defrag(tmp_path, capsys, moves):
    _refused(capsys, _place(tmp_path, "--max-moves", moves), "--max-moves", moves, "--defrag")


@pytest.mark.parametrize("interval", ["5", "10"])   # 10: the default, written out
def test_exporter_refuses_caps_interval_without_a_power_caps_file(capsys, interval):
    _refused(capsys, [*SIM, "--caps-interval", interval], "--caps-interval", repr(float(interval)),
             "--power-caps-file")


@pytest.mark.parametrize(("flag", "value", "shown"), [("--speed", "600", "600.0"), ("--speed", "60", "60.0"),
                                                      ("--seed", "3", "3")])
def test_exporter_refuses_the_simulated_fleets_flags_with_nvml(capsys, flag, value, shown):
    """Refused before NVML is asked: on a machine with no driver too, the flag is what is named."""
    _refused(capsys, [*NVML, flag, value], flag, shown, "--backend sim")


def test_left_out_each_flag_gets_its_default_once_checked():
    """The defaults are None on the command line and filled after the check: a fill forgotten hands None on
    (`SimBackend(speed=None)` froze the simulated clock, `Defragmenter(None)` failed at its first move)."""
    from balancer.cli import build_parser
    from balancer.cmd.exporter import _check

    args = build_parser().parse_args(["exporter", "--backend", "sim"])
    _check(args)
    assert (args.speed, args.seed, args.caps_interval) == (60.0, 0, 10.0)


def test_place_with_defrag_and_no_max_moves_runs(capsys):
    """The demo's own call (the shipped slice: pods there fail and --defrag moves others for them)."""
    data = Path(__file__).resolve().parents[1] / "data" / "alibaba-gpu-v2023"
    assert main(["place", "--nodes", str(data / "openb_node_list_gpu_node_slice.csv"), "--pods",
                 str(data / "openb_pod_list_default_slice.csv"), "--policy", "gputide", "--seeds", "1",
                 "--defrag"]) == 0
