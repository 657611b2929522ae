"""`gputide calibrate --csv`: a true/false where a number belongs exits 2 naming its row, as a trace's does (17a4279):
pandas reads a column of true/false as booleans, and to_numeric took them for 1 and 0 (review r2)."""

from __future__ import annotations

import pytest

from balancer.cmd.calibrate import from_csv
from balancer.errors import InputError


def test_a_true_false_number_is_refused_naming_its_row(tmp_path):
    path = tmp_path / "samples.csv"
    path.write_text("timestamp,demand_rps,replicas,p99_s\n2024-01-01T00:00:00Z,false,2,0.1\n"
                    "2024-01-01T00:01:00Z,true,2,0.1\n")   # a whole column of them: read as booleans
    with pytest.raises(InputError) as err:
        from_csv(str(path))
    assert err.value.field == "demand_rps" and "row 2" in str(err.value)
