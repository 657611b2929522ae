"""`gputide calibrate --csv` refuses the flags only the Prometheus path reads (audit s37, h11): `--step 0`,
`--range=-1d`, `--end 0` and `--demand-query x` were checked only where Prometheus is read, so with --csv they exited
0, ignored. As `--cluster` already was, each is now refused with --csv: exit 2, one line naming the flag, the value
and that it is only for --prometheus."""

from __future__ import annotations

import pytest

from balancer.cli import main
from tests.cli.test_cli_run_inputs import one_error_line

ROWS = "timestamp,demand_rps,replicas,p99_s\n" + "".join(f"{60 * i},{i % 7 + 1},1,0.{i % 5 + 1}\n" for i in range(30))

FLAGS = [("--step", "0"), ("--step", "1m"), ("--range", "-1d"), ("--range", "7d"), ("--end", "0"), ("--end", "now"),
         ("--demand-query", "x"), ("--replicas-query", "up"), ("--latency-query", "up"), ("--cluster", "eu-1")]


@pytest.fixture
def samples(tmp_path):
    path = tmp_path / "calib.csv"
    path.write_text(ROWS)
    return str(path)


@pytest.mark.parametrize("flag, value", FLAGS, ids=[f"{f} {v}" for f, v in FLAGS])
def test_a_prometheus_only_flag_with_csv_exits_2_naming_it(samples, capsys, flag, value):
    code = main(["calibrate", "--csv", samples, f"{flag}={value}"])
    line = one_error_line(capsys)
    assert code == 2, line
    assert line.startswith(f"gputide: error: field '{flag}': invalid value {value!r}; allowed: only with "
                           "--prometheus"), line


def test_the_csv_alone_still_calibrates(samples, capsys):
    assert main(["calibrate", "--csv", samples, "--settle", "0s"]) in (0, 1)
    assert "| service |" in capsys.readouterr().out
