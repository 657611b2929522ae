"""Names the Kubernetes API takes are checked before anything connects (CLI audit of session 37): exit 2, one line
naming the flag, the value and what is allowed.

* `run --leader-elect --lease-name Bad_Name` (or `--lease-namespace 'Bad NS'`) ran as a standby for ever, `--once`
  exiting 0 with "standby not the leader"; `schedule --leader-elect` said "not the leader: another replica holds the
  Lease" (none did: the API server refuses such a Lease, 422);
* `run --shard 'Bad Shard'` elected on the Lease gputide-controller-Bad Shard, which no API server takes;
* `schedule --scheduler-name 'Bad Name'` waited for pods whose spec.schedulerName no pod can have (a DNS-1123
  subdomain, as Kubernetes validates it);
* `power-cap-agent --node 'Bad Node'` read a Node no cluster can have, every interval;
* `schedule --lease-name foo` without --leader-elect was ignored: it names the Lease elected on, and nothing else.
"""

from __future__ import annotations

import pytest

from balancer.actuate import kubernetes
from balancer.cli import main
from tests.cli.test_cli_run_inputs import KUBECONFIG, one_error_line

PROM = "http://127.0.0.1:1"   # nothing answers there
RUN = ["run", "--prometheus", PROM, "--dry-run", "--once", "--metrics-port", "0", "--kubeconfig", "{kc}"]
SCHEDULE = ["schedule", "--once", "--metrics-port", "0", "--kubeconfig", "{kc}"]
AGENT = ["power-cap-agent", "--once", "--port", "0", "--kubeconfig", "{kc}"]
SUBDOMAIN = "a DNS-1123 subdomain"
LABEL = "a DNS-1123 label"
LONG = "a" * 254

CASES = [
    (RUN, ["--leader-elect", "--lease-name", "Bad_Name"], "--lease-name", "Bad_Name", SUBDOMAIN),
    (RUN, ["--leader-elect", "--lease-name", LONG], "--lease-name", LONG, "at most 253"),
    (RUN, ["--leader-elect", "--lease-namespace", "Bad NS"], "--lease-namespace", "Bad NS", LABEL),
    (RUN, ["--leader-elect", "--lease-namespace", "a.b"], "--lease-namespace", "a.b", LABEL),
    (RUN, ["--lease-namespace", "x" * 64], "--lease-namespace", "x" * 64, "at most 63"),
    (RUN, ["--shard", "Bad Shard", "--selector", "pool=x"], "--shard", "Bad Shard", SUBDOMAIN),
    (RUN, ["--shard", "a" * 240, "--selector", "pool=x"], "--shard", "a" * 240, "at most 234 characters"),
    (SCHEDULE, ["--leader-elect", "--lease-name", "Bad_Name"], "--lease-name", "Bad_Name", SUBDOMAIN),
    (SCHEDULE, ["--leader-elect", "--lease-namespace", "Bad NS"], "--lease-namespace", "Bad NS", LABEL),
    (SCHEDULE, ["--scheduler-name", "Bad Name"], "--scheduler-name", "Bad Name", "spec.schedulerName"),
    (SCHEDULE, ["--scheduler-name", "gputide-"], "--scheduler-name", "gputide-", SUBDOMAIN),
    (SCHEDULE, ["--lease-name", "foo"], "--lease-name", "foo", "only with --leader-elect"),
    (SCHEDULE, ["--lease-namespace", "gputide"], "--lease-namespace", "gputide", "only with --leader-elect"),
    (AGENT, ["--node", "Bad Node"], "--node", "Bad Node", SUBDOMAIN),
    (AGENT, ["--node", "node_1"], "--node", "node_1", "this node's name"),
]


@pytest.fixture
def no_api(monkeypatch, tmp_path):
    """A kubeconfig file, and an API client nothing may build: every case must fail before anything connects."""
    import yaml

    kc = tmp_path / "kc.yaml"
    kc.write_text(yaml.safe_dump(KUBECONFIG))

    def refused(*_a, **_k):
        raise AssertionError("an API client was built before the bad name was refused")

    monkeypatch.setattr(kubernetes, "build_api_client", refused)
    return str(kc)


@pytest.mark.parametrize("base, extra, flag, value, allowed", CASES,
                         ids=[f"{b[0]} {' '.join(e)[:40]}" for b, e, *_ in CASES])
def test_a_name_the_api_cannot_take_exits_2_naming_flag_value_and_what_is_allowed(no_api, capsys, base, extra, flag,
                                                                                  value, allowed):
    argv = [a.replace("{kc}", no_api) for a in base] + extra
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"gputide: error: field '{flag}': invalid value {value!r}; allowed: "), line
    assert allowed in line, line


GOOD_AND_BAD = [  # (a command line with names the API takes, one name in it made bad)
    ([*RUN, "--leader-elect", "--lease-name", "gputide.controller-2", "--lease-namespace", "ml-0", "--shard", "eu.1",
      "--selector", "pool=x"], "eu.1", "EU.1"),
    ([*SCHEDULE, "--leader-elect", "--lease-name", "s.1", "--lease-namespace", "gputide", "--scheduler-name",
      "gputide.io-2"], "gputide.io-2", "gputide.io_2"),
    ([*AGENT, "--node", "ip-10-0-0-1.ec2.internal"], "ip-10-0-0-1.ec2.internal", "ip-10-0-0-1.ec2.internal."),
]


@pytest.mark.parametrize("argv, good, bad", GOOD_AND_BAD, ids=[a[0] for a, *_ in GOOD_AND_BAD])
def test_only_names_the_api_cannot_take_are_refused(no_api, argv, good, bad):
    """Dots, digits and dashes inside, as Kubernetes allows, pass the checks: the command goes on to build its API
    client (refused here, so it stops there). The same line with one bad name stops before it."""
    argv = [a.replace("{kc}", no_api) for a in argv]
    with pytest.raises(AssertionError, match="API client was built"):
        main(argv)
    assert main([bad if a == good else a for a in argv]) == 2
