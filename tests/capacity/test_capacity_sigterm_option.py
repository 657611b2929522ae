"""`gputide simulate --scenario tidal --checkpoint-on-sigterm none|all`: whether the tide's training jobs save a
checkpoint when a shrink stops their workers. `none`, the default, is the honest assumption (a shrink loses the
work since the job's last checkpoint, as gputide assumes of a Job without `gputide.io/checkpoint-on-sigterm`);
`all` is the best case. summary.json states which one a run made."""

from __future__ import annotations

import json

import pytest

from balancer.app import scenarios, tidal  # noqa: F401 - registers the tidal scenario
from balancer.cli import main
from balancer.errors import InputError


@pytest.mark.parametrize(("flag", "expected"), [([], "none"), (["--checkpoint-on-sigterm", "all"], "all"),
                                                (["--checkpoint-on-sigterm", "none"], "none")])
def test_the_run_says_which_assumption_it_made(tmp_path, capsys, flag, expected):
    out = tmp_path / "out"
    code = main(["simulate", "--scenario", "tidal", "--policy", "none", "--days", "0.02", "--no-plots",
                 "--print", "json", "--out", str(out), *flag])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tidal"]["checkpoint_on_sigterm"] == expected


@pytest.mark.parametrize("value", ["all", "none"])
def test_the_jobs_carry_the_option(value):
    sim, _events, _days = scenarios.build("tidal", days=0.02, setup_options={"checkpoint_on_sigterm": value})
    assert {j.checkpoint_on_sigterm for j in sim.training_jobs.values()} == {value == "all"}


def test_an_unknown_value_or_a_scenario_without_the_option_is_an_input_error(tmp_path, capsys):
    with pytest.raises(InputError) as err:
        scenarios.build("tidal", days=0.02, setup_options={"checkpoint_on_sigterm": "some"})
    assert err.value.field == "--checkpoint-on-sigterm"
    code = main(["simulate", "--scenario", "hotspot", "--policy", "none", "--days", "0.01", "--no-plots",
                 "--out", str(tmp_path / "out"), "--checkpoint-on-sigterm", "all"])
    err_text = capsys.readouterr().err
    assert code == 2 and "--checkpoint-on-sigterm" in err_text and "Traceback" not in err_text
