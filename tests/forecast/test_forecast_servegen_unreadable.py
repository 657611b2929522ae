"""A ServeGen client file that cannot be read is an InputError naming the file and why.

Before (audit a1): an empty file, one not UTF-8, one of a single column or a folder named `*.csv` all read
"allowed: headerless rows window_start_s,rate_req_per_s,..." and nothing more: the reason was dropped.
"""

from __future__ import annotations

import pytest

from balancer.errors import InputError
from balancer.forecast.traces import load_demand


@pytest.mark.parametrize("write, reason", [
    pytest.param(lambda p: p.write_bytes(b""), "No columns to parse", id="empty"),
    pytest.param(lambda p: p.write_bytes(b"0,1\n\xff\xfe,2\n"), "can't decode byte 0xff", id="not UTF-8"),
    pytest.param(lambda p: p.write_text("0\n600\n"), "not found: [1]", id="one column"),
    pytest.param(lambda p: p.mkdir(), "Is a directory", id="a folder"),
])
def test_an_unreadable_client_file_names_itself_and_the_reason(tmp_path, write, reason):
    (tmp_path / "a.csv").write_text("0,1\n600,2\n1200,3\n")
    bad = tmp_path / "b.csv"
    write(bad)
    with pytest.raises(InputError) as err:
        load_demand(tmp_path, "servegen")
    message = str(err.value)
    assert message.startswith(f"{bad}: field 'file': invalid value 'b.csv'; allowed: headerless rows"), message
    assert reason in message, message
