"""`gputide run --shard NAME` without `--selector` (or with one of commas and blanks only) is refused: the empty
selector matches every node, so the shard acted on the whole cluster, every other shard's nodes included, each node
then planned and acted on by two controllers on two Leases."""

from __future__ import annotations

import pytest

from balancer.cli import main
from balancer.errors import InputError
from balancer.telemetry.shard import parse_selector


@pytest.mark.parametrize("argv", [["--shard", "a"], ["--shard", "a", "--selector", " , "]],
                         ids=["no selector", "commas only"])
def test_a_shard_without_a_selector_exits_2_naming_it(argv, capsys):
    rc = main(["run", "--prometheus", "http://127.0.0.1:9", "--once", "--dry-run", "--metrics-port", "0", *argv])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--selector" in err and "every node" in err


def test_parse_selector_refuses_an_empty_text():
    with pytest.raises(InputError, match="shard x selector"):
        parse_selector("x", "")



@pytest.mark.parametrize("text", ["pool=a,,site=b", "pool=a,", ",pool=a", "pool=a, ,site=b"])
def test_parse_selector_refuses_an_empty_item(text):
    """As every other comma list of the CLI (`_args.items`): an empty item was dropped without a word (review r3)."""
    with pytest.raises(InputError, match="an empty item"):
        parse_selector("x", text)
