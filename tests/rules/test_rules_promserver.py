"""The project-managed Prometheus: generated config, CLI, and the real binary's lifecycle."""

from __future__ import annotations

import pytest
import yaml

from balancer.cli import main
from balancer.telemetry.promserver import (
    PrometheusNotInstalled,
    PrometheusServer,
    PrometheusServerError,
    Target,
    build_config,
    default_rule_files,
    parse_duration,
    write_config,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("1s", 1), ("15s", 15), ("5m", 300), ("1h", 3600), ("2d", 172800), ("1w", 604800),
     ("1y", 365 * 86400), ("1m30s", 90), ("1h30m", 5400), ("1s500ms", 1.5), ("1m0s", 60),
     ("1y2w3d4h5m6s7ms", 365 * 86400 + 17 * 86400 + 4 * 3600 + 5 * 60 + 6.007), ("292y", 292 * 365 * 86400)],
    ids=["milliseconds", "one second", "fifteen seconds", "minutes", "hours", "days", "weeks", "years", "1m30s",
         "1h30m", "1s500ms", "a zero part", "every unit", "292 years: under Go's limit"],
)
def test_parse_duration_reads_prometheus_durations(text, seconds):
    """Prometheus' own grammar (model.ParseDuration): units ms s m h d w y, longest first, each once."""
    assert parse_duration(text) == pytest.approx(seconds, abs=1e-9)


@pytest.mark.parametrize("text", ["", "5", "s", "0s", "-1s", "1.5s", "5x"],
                         ids=["empty", "no unit", "no number", "zero", "negative", "fraction", "bad unit"])
def test_parse_duration_refuses_anything_else(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(("text", "near_miss"), [
    ("1m30s", "30s1m"), ("1m30s", "1m1m"), ("1m30s", "1m 30s"), ("1m30s", "1m30s\n"), ("1m30s", "1M30s"),
    ("1s500ms", "1s500"), ("1m0s", "0m0s"), ("292y", "293y"),
], ids=["out of order", "a unit twice", "a space", "a newline", "upper case", "a part without unit", "zero parts",
        "past Go's time.Duration"])
def test_parse_duration_reads_a_compound_duration_but_not_its_near_miss(text, near_miss):
    """What Prometheus refuses is refused here too: a config it would not load is never written."""
    assert parse_duration(text) > 0
    with pytest.raises(ValueError):
        parse_duration(near_miss)


def test_every_target_gets_a_cluster_label_and_its_own_labels_win():
    config = build_config([Target("a", "h1:1"), Target("a", "h2:2", {"cluster": "east", "rack": "r1"}),
                           Target("b", "h3:3")], ["r.yaml"], cluster="west")
    jobs = {c["job_name"]: c["static_configs"] for c in config["scrape_configs"]}
    assert list(jobs) == ["a", "b"]
    assert [s["labels"] for s in jobs["a"]] == [{"cluster": "west"}, {"cluster": "east", "rack": "r1"}]
    assert jobs["b"] == [{"targets": ["h3:3"], "labels": {"cluster": "west"}}]
    assert config["rule_files"] == ["r.yaml"]


@pytest.mark.parametrize(
    ("interval", "timeout"), [("1s", "1s"), ("5s", "5s"), ("30s", "10s")],
    ids=["short interval caps the timeout", "demo interval", "long interval keeps 10s"],
)
def test_scrape_timeout_never_exceeds_the_interval(interval, timeout):
    assert build_config([], [], scrape_interval=interval)["global"]["scrape_timeout"] == timeout


def test_extra_config_extends_scrape_configs_and_merges_sections():
    extra = {"scrape_configs": [{"job_name": "x"}], "global": {"external_labels": {"r": "1"}}, "alerting": {}}
    config = build_config([Target("a", "h:1")], [], extra_config=extra)
    assert [c["job_name"] for c in config["scrape_configs"]] == ["a", "x"]
    assert config["global"]["external_labels"] == {"r": "1"} and config["global"]["scrape_interval"] == "5s"
    assert config["alerting"] == {}


def test_write_config_copies_rules_and_can_shorten_alert_for(tmp_path):
    path = write_config(tmp_path, [Target("a", "h:1")], default_rule_files(), alert_for="0s")
    config = yaml.safe_load(path.read_text())
    assert config["rule_files"] == ["rules/gputide-alerts.yaml", "rules/gputide-recording.yaml"]
    alerts = yaml.safe_load((tmp_path / "rules" / "gputide-alerts.yaml").read_text())
    rules = [r for g in alerts["groups"] for r in g["rules"]]
    assert {r.get("for") for r in rules if "alert" in r} == {"0s"}
    assert not [r["record"] for r in rules if "record" in r and "for" in r]  # node:gpu_maintained:bool is a record


def test_the_normalised_series_are_evaluated_every_15_s_except_on_a_managed_server(tmp_path):
    """The rules file pins the normalisation group to 15 s (the controller's freshness check counts on it); the
    managed server's copy drops it, evaluating every group at its own (scrape) interval."""
    shipped = yaml.safe_load(next(p for p in default_rule_files() if p.name == "gputide-recording.yaml").read_text())
    group = next(g for g in shipped["groups"] if g["name"] == "gputide-gpu-normalise")
    assert group["interval"] == "15s"
    write_config(tmp_path, [Target("a", "h:1")], default_rule_files())
    copied = yaml.safe_load((tmp_path / "rules" / "gputide-recording.yaml").read_text())
    assert all("interval" not in g for g in copied["groups"])
    assert [g["name"] for g in copied["groups"]] == [g["name"] for g in shipped["groups"]]


def test_a_missing_binary_says_how_to_install_it(tmp_path):
    server = PrometheusServer([], binary="prometheus-does-not-exist", directory=tmp_path)
    with pytest.raises(PrometheusNotInstalled, match="apt-get install prometheus"):
        server.start()


def test_cli_config_only_prints_a_config_with_targets_and_rules(capsys):
    assert main(["prometheus", "--config-only", "--targets", "127.0.0.1:9835,10.0.0.2:9400",
                 "--controller", "127.0.0.1:9100", "--cluster", "lab"]) == 0
    config = yaml.safe_load(capsys.readouterr().out)
    targets = {c["job_name"]: [t for s in c["static_configs"] for t in s["targets"]] for c in config["scrape_configs"]}
    assert targets == {"gputide-exporter": ["127.0.0.1:9835", "10.0.0.2:9400"],
                       "gputide-controller": ["127.0.0.1:9100"]}
    assert all(f.endswith(".yaml") and f.startswith("/") for f in config["rule_files"])


def test_cli_config_only_writes_a_self_contained_folder(tmp_path):
    assert main(["prometheus", "--config-only", "--targets", "h:1", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "prometheus.yml").is_file()
    assert sorted(p.name for p in (tmp_path / "rules").iterdir()) == [p.name for p in default_rule_files()]


@pytest.mark.parametrize(
    "argv",
    [["--targets", "nohost"], ["--targets", "h:99999"], ["--targets", ","],
     ["--targets", "h:1", "--rules", "/nope.yaml"],
     ["--targets", "h:1", "--scrape-interval", "fast"], ["--targets", "h:1", "--controller", "h:x"],
     ["--targets", "h:1,,h:2"], ["--targets", "h:1,h:1"]],
    ids=["no port", "port out of range", "empty list", "missing rule file", "bad interval", "bad controller",
         "empty item", "repeated address"],
)
def test_cli_bad_input_exits_2(argv, capsys):
    assert main(["prometheus", "--config-only", *argv]) == 2
    assert "invalid value" in capsys.readouterr().err


@pytest.mark.integration
def test_real_prometheus_scrapes_reloads_and_survives_a_restart(prometheus_factory, metrics_server):
    first = metrics_server("# TYPE probe gauge\nprobe 1\n")
    second = metrics_server("# TYPE probe gauge\nprobe 2\n")
    prom = prometheus_factory([Target("probe", first.address)], cluster="lab")
    assert prom.wait_for("probe")[0]["metric"] == {"__name__": "probe", "cluster": "lab", "instance": first.address,
                                                   "job": "probe"}
    prom.reload([Target("probe", first.address), Target("probe", second.address)])
    scraped = prom.wait_for("sum(probe)", lambda r: bool(r) and r[0]["value"][1] == "3")
    assert set(prom.targets_health()) == {f"http://{m.address}/metrics" for m in (first, second)}
    prom.restart()  # same port, same data directory
    assert prom.running
    # the data from before the restart is still there, for both targets. Not `sum(probe)` at that instant: a
    # shutdown slower than the grace period is a SIGKILL, which may lose the last unflushed WAL page, and with it
    # the newest sample of a series whose previous one is the staleness marker of the reload (seen once in CI)
    survived = prom.query("count by (instance) (count_over_time(probe[5m]))", at=scraped[0]["value"][0])
    assert {r["metric"]["instance"] for r in survived} == {first.address, second.address}


@pytest.mark.integration
def test_a_refused_reload_and_a_bad_query_raise(prometheus_factory):
    prom = prometheus_factory([])
    with pytest.raises(PrometheusServerError, match="parse"):
        prom.query("sum(")
    prom._options["extra_config"] = {"scrape_configs": [{"job_name": "bad", "static_configs": "oops"}]}
    with pytest.raises(PrometheusServerError, match="reload"):
        prom.reload()
    assert prom.running


@pytest.mark.integration
def test_a_config_prometheus_rejects_fails_with_its_log(prometheus_factory):
    with pytest.raises(PrometheusServerError, match="exited during startup"):
        prometheus_factory([], extra_config={"scrape_configs": [{"job_name": "bad", "static_configs": "oops"}]})


@pytest.mark.integration
def test_a_relative_directory_works_from_any_working_directory(tmp_path, monkeypatch, metrics_server):
    # `gputide demo --out out` hands the server a relative folder; the binary runs inside it, so the server must
    # pass absolute paths or Prometheus looks for out/.../prometheus.yml inside out/... and exits
    from tests.conftest import require_binary

    require_binary("prometheus")
    probe = metrics_server("# TYPE probe gauge\nprobe 1\n")
    monkeypatch.chdir(tmp_path)
    server = PrometheusServer([Target("probe", probe.address)], directory="out/prometheus", scrape_interval="1s")
    try:
        server.start()
        assert server.wait_for("probe")[0]["value"][1] == "1"
        assert server.directory == tmp_path / "out" / "prometheus"
    finally:
        server.stop()


def test_an_installed_copy_finds_the_rules_where_gputide_rules_dir_says(tmp_path):
    """In the image the package is installed away from the repository: GPUTIDE_RULES_DIR points at the rules."""
    import subprocess
    import sys

    (tmp_path / "only.yaml").write_text("groups: []\n")
    code = "from balancer.telemetry.promserver import default_rule_files; print([p.name for p in default_rule_files()])"
    out = subprocess.run([sys.executable, "-c", code], env={"GPUTIDE_RULES_DIR": str(tmp_path), "PATH": "/usr/bin"},
                         capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "['only.yaml']"
