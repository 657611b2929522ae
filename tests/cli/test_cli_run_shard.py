"""`gputide run` at the CLI boundary: --shard NAME --selector EXPR (one controller per node pool), --prometheus."""

from __future__ import annotations

import pytest

from balancer.cli import build_parser, main
from balancer.cmd.run import build_reconciler
from balancer.metrics import ControllerMetrics
from balancer.telemetry.shard import ShardedSource


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--selector", "pool=H100-SXM"], "--selector"),
     (["--shard", "a", "--selector", "pool"], "key=value"),
     (["--fleet", "/nonexistent/fleet.yaml"], "fleet.yaml")],
    ids=["selector-without-shard", "selector-without-value", "missing-fleet-file"],
)
def test_bad_shard_arguments_exit_2_naming_the_field(argv, message, capsys):
    rc = main(["run", "--prometheus", "http://127.0.0.1:9", "--once", "--dry-run", "--metrics-port", "0", *argv])
    assert rc == 2
    assert message in capsys.readouterr().err


def test_a_shard_reads_through_a_sharded_source(tmp_path):
    args = build_parser().parse_args(["run", "--prometheus", "http://127.0.0.1:9", "--dry-run", "--shard", "east",
                                      "--selector", "pool=H100-SXM,site=site-a"])
    reconciler = build_reconciler(args, ControllerMetrics())
    assert isinstance(reconciler.source, ShardedSource)
    assert reconciler.source.selector.name == "east"
    assert reconciler.source.selector.pools == frozenset({"H100-SXM"})


def test_a_shard_holds_still_like_any_controller_when_prometheus_is_down(capsys):
    rc = main(["--log-level", "ERROR", "run", "--prometheus", "http://127.0.0.1:9", "--once", "--dry-run",
               "--metrics-port", "0", "--shard", "east", "--selector", "pool=H100-SXM"])
    assert rc == 3


@pytest.mark.parametrize("url", ["prometheus:9090", "ftp://prometheus", "http://"])
def test_a_prometheus_url_without_http_scheme_or_host_exits_2_before_connecting(url, capsys):
    assert main(["run", "--prometheus", url, "--once", "--dry-run", "--metrics-port", "0"]) == 2
    err = capsys.readouterr().err
    assert "--prometheus" in err and url in err and "http://" in err


@pytest.mark.parametrize("name", ['east"} or vector(1) #', "", "a\\b"])
def test_a_cluster_name_that_would_break_the_promql_exits_2(name, capsys):
    assert main(["run", "--prometheus", "http://127.0.0.1:9", "--cluster", name, "--once", "--dry-run",
                 "--metrics-port", "0"]) == 2
    assert "--cluster" in capsys.readouterr().err


def test_the_cluster_reaches_the_telemetry_source():
    args = build_parser().parse_args(["run", "--prometheus", "http://127.0.0.1:9", "--dry-run", "--cluster", "east"])
    assert build_reconciler(args, ControllerMetrics()).source.opts.cluster == "east"
