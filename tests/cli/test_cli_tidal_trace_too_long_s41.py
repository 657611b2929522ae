"""`simulate --scenario tidal` refuses a trace too long for the scenario as such (audit a3 of 5859090d): the tidal
scenario loads its trace at 10-minute steps whatever --step is, so the loader's 'a --step of at least 800 seconds
loads it' named a flag that changes nothing there."""

from __future__ import annotations

from balancer.cli import main

NO_DEMAND = ("field 'value': invalid value 'no positive demand'; allowed: a trace with positive demand values (every "
             "observed value is 0)")


def _refused(tmp_path, capsys, trace) -> str:
    code = main(["simulate", "--scenario", "tidal", "--policy", "static", "--days", "0.1", "--no-plots",
                 "--out", str(tmp_path / "out"), "--trace", str(trace), "--step", "60"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_a_trace_too_long_for_tidal_is_refused_naming_its_span_and_the_most_it_plays(tmp_path, capsys):
    trace = tmp_path / "long.csv"   # 1970 to 2096: 4e9 s, 6.7M steps of 10 min (at most 5M)
    trace.write_text("timestamp,value\n0,5\n600,6\n1200,7\n4000000000,5\n")
    err = _refused(tmp_path, capsys, trace)
    assert (f"{trace}: field 'trace': invalid value 'a trace spanning 4000000000s'; allowed: a trace spanning at most "
            "3000000000s (95.1 years): the tidal scenario plays it at 10min steps, at most 5000000 of them, "
            "whatever --step") in err, err
    assert "--step of at least" not in err


def test_a_trace_of_zeros_is_refused_as_the_loader_refuses_one_for_hotspot(tmp_path, capsys):
    """Field 'value', as `simulate --scenario hotspot` words it (test_cli_simulate_zero_trace_s41.py); tidal said
    field 'trace', 'a trace with positive demand'."""
    trace = tmp_path / "zeros.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{600 * i},0\n" for i in range(200)))
    assert f"{trace}: {NO_DEMAND}" in _refused(tmp_path, capsys, trace)


def test_a_trace_of_zeros_too_long_for_tidal_is_refused_as_having_no_demand(tmp_path, capsys):
    """Refused as too long first, a trace shortened to fit was then refused as this (as hotspot's was, e7b98461)."""
    trace = tmp_path / "long.csv"
    trace.write_text("timestamp,value\n0,0\n600,\n1200,0\n4000000000,0\n")
    err = _refused(tmp_path, capsys, trace)
    assert f"{trace}: {NO_DEMAND}" in err, err


def test_a_trace_of_zeros_under_two_steps_for_tidal_is_refused_as_having_no_demand(tmp_path, capsys):
    """A 1-minute trace of zeros was refused as under two 10-minute steps ('field 'rows': invalid value 1'), then,
    made 20 minutes long, as having no demand; hotspot refuses it as that at once."""
    trace = tmp_path / "short.csv"
    trace.write_text("timestamp,value\n0,0\n60,0\n")
    err = _refused(tmp_path, capsys, trace)
    assert f"{trace}: {NO_DEMAND}" in err, err
    assert "'rows'" not in err, err

