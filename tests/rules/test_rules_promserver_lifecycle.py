"""`gputide prometheus` as an operator runs it: a taken --port, a start interrupted, a closed terminal, a config for
a long scrape interval and how long the data is kept. No Prometheus may outlive the command."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from balancer.cli import main
from balancer.telemetry import promserver
from balancer.telemetry.promserver import PrometheusServer, PrometheusServerError, Target

ROOT = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    """Running (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def normalise_interval(directory: Path) -> str | None:
    copied = yaml.safe_load((directory / "rules" / "gputide-recording.yaml").read_text())
    return next(g for g in copied["groups"] if g["name"] == "gputide-gpu-normalise").get("interval")


@pytest.mark.parametrize(("interval", "kept"), [("1s", None), ("5s", None), ("30s", "15s"), ("1m", "15s")],
                         ids=["test server", "demo", "half a minute", "a minute"])
def test_the_normalisation_group_keeps_15s_where_the_scrape_interval_is_longer(tmp_path, capsys, interval, kept):
    """A 1 m evaluation adds up to a minute to every GPU reading's age (README: the controller's --stale-after);
    the written folder evaluated the group every minute while the printed config kept 15 s."""
    assert main(["prometheus", "--config-only", "--targets", "127.0.0.1:9835", "--scrape-interval", interval,
                 "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert normalise_interval(tmp_path) == kept


def test_an_explicit_port_already_taken_exits_2_naming_the_port(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["prometheus", "--run", "--targets", "127.0.0.1:9", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert "--port" in err and str(port) in err and "Starting Prometheus" not in err


@pytest.mark.parametrize("flag", ["--retention=forever", "--retention=-1d", "--retention=0d"])
def test_a_bad_retention_exits_2(capsys, flag):
    assert main(["prometheus", "--run", "--targets", "127.0.0.1:9", flag]) == 2
    assert "--retention" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "kept"), [([], "1d"), (["--out", "{tmp}"], "15d"), (["--retention", "30d"], "30d")],
                         ids=["throw-away data", "a data directory kept between runs", "as asked"])
def test_how_long_the_data_is_kept(tmp_path, monkeypatch, capsys, argv, kept):
    seen = {}

    class Recorder(PrometheusServer):
        def start(self):
            seen["retention"] = self.retention
            raise PrometheusServerError("not started in this test")

    monkeypatch.setattr("balancer.cmd.prometheus.PrometheusServer", Recorder)
    flags = [a.replace("{tmp}", str(tmp_path / "prom")) for a in argv]
    assert main(["prometheus", "--run", "--targets", "127.0.0.1:9", *flags]) == 1
    assert seen["retention"] == kept


def test_an_interrupted_start_leaves_no_process_and_no_folder(tmp_path, monkeypatch):
    """Ctrl-C (or `kill`, which the command turns into one) while Prometheus starts: the process it spawned is
    stopped and the temporary folder removed. Before, `with` never reached __exit__ and both stayed."""
    fake = tmp_path / "prometheus"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")  # never ready
    fake.chmod(0o755)
    spawned = []
    real_spawn = PrometheusServer._spawn

    def spawn(self, path):
        real_spawn(self, path)
        spawned.append(self._process.pid)

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(PrometheusServer, "_spawn", spawn)
    monkeypatch.setattr(PrometheusServer, "_wait_ready", interrupted)
    server = PrometheusServer([Target("a", "127.0.0.1:9")], binary=str(fake))
    try:
        with pytest.raises(KeyboardInterrupt), server:
            pass
        assert spawned and not alive(spawned[0])
        assert not server.directory.exists()
    finally:
        for pid in spawned:  # what this test started, by its id
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc/*/stat: the children file needs CONFIG_PROC_CHILDREN)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=["terminal closed", "kill"])
def test_a_closed_terminal_or_kill_stops_prometheus_with_the_command(sig):
    """SIGHUP (the terminal or SSH session went away) killed Python at once and left Prometheus running: it takes
    SIGHUP as 'reload', so an orphan kept the port and the data directory."""
    if promserver.shutil.which("prometheus") is None:
        pytest.skip("prometheus not installed")
    cmd = [sys.executable, "-m", "balancer.cli", "prometheus", "--run", "--targets", "127.0.0.1:9"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started: list[int] = []
    try:
        line = proc.stdout.readline()
        assert "Prometheus ready" in line, line + proc.stdout.read()
        started = children(proc.pid)
        assert started, "no Prometheus child"
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        deadline = time.monotonic() + 15
        while any(alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(p) for p in started), "Prometheus outlived the command"
    finally:
        for pid in [proc.pid, *started]:  # what this test started, by its id
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_a_port_the_last_run_left_in_time_wait_is_free():
    """Prometheus (Go) binds with SO_REUSEADDR: the check must not refuse a port a closed connection still holds."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Go's net.Listen, Prometheus' listener
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its end of the connection waits in TIME_WAIT
        client.close()
    from balancer.cmd.prometheus import _free

    _free(port)  # no InputError


@pytest.mark.parametrize("mode", [["--config-only", "--out", "{tmp}/prom"], ["--run"]], ids=["written", "run"])
def test_two_rule_files_of_one_name_exit_2_rather_than_one_overwriting_the_other(tmp_path, capsys, mode):
    for team in ("a", "b"):
        (tmp_path / team).mkdir()
        (tmp_path / team / "slo.yaml").write_text(f"groups:\n  - name: slo-{team}\n    rules: []\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in mode]
    assert main(["prometheus", *argv, "--targets", "127.0.0.1:9", "--rules", str(tmp_path / "a" / "slo.yaml"),
                 str(tmp_path / "b" / "slo.yaml")]) == 2
    assert "--rules" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [["--port", "9090"], ["--retention", "30d"]], ids=["port", "retention"])
def test_flags_of_the_running_server_exit_2_with_config_only_rather_than_vanish(capsys, flag):
    assert main(["prometheus", "--config-only", "--targets", "127.0.0.1:9", *flag]) == 2
    assert flag[0] in capsys.readouterr().err
