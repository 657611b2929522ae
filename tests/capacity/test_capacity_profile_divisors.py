"""ServiceProfiles fields something is divided by have a real lower bound (audit s32x5, item 2): `rpsPerReplica:
1.0e-320` passed `> 0`, so `gputide check` said the file was valid and the planner's demand / rpsPerReplica
overflowed later (OverflowError in capacity_plan.replicas_for). Now the loader refuses it at start: exit 2, one line
naming the file, the field, the value and the range."""

from __future__ import annotations

import pytest

from balancer.app.capacity_run import load_profiles
from balancer.cli import main
from balancer.errors import InputError

DOC = "apiVersion: gputide/v1alpha1\nkind: ServiceProfiles\nservices:\n  - name: chat\n    {field}: {value}\n"


@pytest.mark.parametrize("field, value, allowed", [
    ("rpsPerReplica", "1.0e-320", "a number from 1e-06 to 1e+09"),
    ("rpsPerReplica", "1.0e-7", "a number from 1e-06 to 1e+09"),
    ("rpsPerReplica", "1.0e+300", "a number from 1e-06 to 1e+09"),
    ("latencySloSeconds", "1.0e-320", "a number from 0.001 to 3600"),
])
def test_check_refuses_a_divisor_that_would_overflow(tmp_path, capsys, field, value, allowed):
    text = DOC.format(field=field, value=value)
    if field != "rpsPerReplica":
        text += "    rpsPerReplica: 3\n"
    path = tmp_path / "services.yaml"
    path.write_text(text)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr()
    out = (err.out + err.err).strip()
    assert f"field 'services[0].{field}'" in out and str(path) in out and allowed in out, out
    with pytest.raises(InputError):
        load_profiles(str(path))


@pytest.mark.parametrize("value", ["1.0e-6", "0.01", "1.0e+9"])
def test_the_smallest_and_largest_rates_still_load(tmp_path, value):
    path = tmp_path / "services.yaml"
    path.write_text(DOC.format(field="rpsPerReplica", value=value))
    assert load_profiles(str(path))["chat"].rps_per_replica == float(value)


# one bound each way and one wording (review of s32): rpsPerReplica 0 said "> 0", 1e-9 "from 1e-06 to 1e+09" and 2e9
# "up to 1e+09", the lows and highs living in three tables
@pytest.mark.parametrize("field, value, allowed", [
    ("rpsPerReplica", "0", "a number from 1e-06 to 1e+09"),
    ("rpsPerReplica", "1.0e-9", "a number from 1e-06 to 1e+09"),
    ("rpsPerReplica", "2.0e+9", "a number from 1e-06 to 1e+09"),
    ("latencySloSeconds", "-1", "a number from 0.001 to 3600"),
    ("latencySloSeconds", "7200", "a number from 0.001 to 3600"),
    ("warmupSeconds", "-1", "a number from 0 to 86400"),
    ("gpusPerReplica", "0", "an integer from 1 to 64"),
    ("gpusPerReplica", "65", "an integer from 1 to 64"),
    ("maxReplicas", "100001", "an integer from 1 to 100000"),
    ("homeReplicas", "-1", "an integer from 0 to 100000"),
])
def test_every_number_is_refused_with_its_range_from_lo_to_hi(tmp_path, field, value, allowed):
    text = DOC.format(field=field, value=value) + ("" if field == "rpsPerReplica" else "    rpsPerReplica: 3\n")
    path = tmp_path / "services.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_profiles(str(path))
    assert f"; allowed: {allowed}" in str(err.value) and "> 0" not in str(err.value), str(err.value)


def test_a_number_yaml_reads_as_text_keeps_its_hint_with_the_range(tmp_path):
    path = tmp_path / "services.yaml"
    path.write_text(DOC.format(field="rpsPerReplica", value="1e-3"))
    with pytest.raises(InputError) as err:
        load_profiles(str(path))
    assert "a number from 1e-06 to 1e+09" in str(err.value) and "write 0.001" in str(err.value), str(err.value)
