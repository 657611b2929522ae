"""A project-managed Prometheus: the real `prometheus` binary, on loopback, with a generated config.

The demo, the integration tests and `gputide prometheus --run` all need the same thing: a Prometheus that
scrapes a few known targets (our exporters, dcgm-exporters, the controller's metrics endpoint), loads
`rules/*.yaml`, keeps its data in a throw-away directory and goes away cleanly. `PrometheusServer` is that,
as a context manager:

    with PrometheusServer([Target("gputide-exporter", "127.0.0.1:9835")], rule_files=default_rule_files(),
                          scrape_interval="1s") as prom:
        prom.wait_for("gpu:temperature:celsius", lambda r: len(r) == 8, timeout=15)

Every target gets a `cluster` label (default "local", a target's own labels win) so rules and dashboards can
group by cluster. `write_config()` renders the same configuration into a directory for an existing setup
(`gputide prometheus --config-only`); rule files are copied next to it so the directory is self-contained.

`query()`, `alerts()` and `wait_for()` are small urllib helpers for tests and the demo only; the controller
reads Prometheus through the telemetry source, not through this module.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from balancer.errors import GputideError

INSTALL_HINT = "install Debian's prometheus package: apt-get install prometheus (or make test does it)"
# the repository's rules/, or where an installed copy keeps them (the image sets GPUTIDE_RULES_DIR=/opt/gputide/rules)
RULES_DIR = Path(os.environ.get("GPUTIDE_RULES_DIR") or Path(__file__).resolve().parents[2] / "rules")
# Prometheus' duration grammar (prometheus/common model.ParseDuration): whole numbers with units, each unit at most
# once and from the longest to the shortest (`1h30m`, `1m30s`, `2d12h`); a year is 365 days. In milliseconds, so a sum
# of them is exact. Prometheus refuses a duration past what Go's time.Duration holds: 2^63-1 nanoseconds (292y).
_UNITS_MS = {"y": 365 * 86_400_000, "w": 7 * 86_400_000, "d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000,
             "ms": 1}
_DURATION = re.compile("".join(f"(?:([0-9]+){unit})?" for unit in _UNITS_MS))
_MOST_MS = (2**63 - 1) // 1_000_000


class PrometheusServerError(GputideError):
    """The project-managed Prometheus could not be started, reloaded or queried."""


class PrometheusNotInstalled(PrometheusServerError):
    """The `prometheus` binary is not on PATH."""


class PortInUse(PrometheusServerError):
    """The port asked for is taken (another process listens on 127.0.0.1 there)."""


@dataclass(frozen=True)
class Target:
    """One scrape target: the job it belongs to, `host:port`, and extra target labels."""

    job: str
    address: str
    labels: Mapping[str, str] = field(default_factory=dict)


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration ("500ms", "5m", "1m30s", "1h30m", "1w"): its units ms s m h d w y, longest
    first, each once; ValueError for anything else, zero, or one longer than Prometheus reads. One unit alone was
    read here, so `gputide prometheus --scrape-interval 1m30s`, which Prometheus takes, was refused."""
    match = _DURATION.fullmatch(text)
    total_ms = sum(int(n) * ms for n, ms in zip(match.groups(), _UNITS_MS.values()) if n) if match else 0
    if not 0 < total_ms <= _MOST_MS:
        raise ValueError(f"not a Prometheus duration: {text!r} (e.g. 500ms, 5s, 1m, 1m30s)")
    return total_ms / 1000


def default_rule_files() -> list[Path]:
    """The rule files shipped in the repository's rules/ folder (not its tests)."""
    return sorted(RULES_DIR.glob("*.yaml"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def build_config(
    targets: Sequence[Target],
    rule_files: Sequence[str],
    scrape_interval: str = "5s",
    evaluation_interval: str | None = None,
    cluster: str = "local",
    extra_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The prometheus.yml content as a dict; one scrape job per distinct `Target.job`, in order."""
    interval_s = parse_duration(scrape_interval)
    parse_duration(evaluation_interval or scrape_interval)
    timeout = scrape_interval if interval_s < 10 else "10s"  # Prometheus refuses timeout > interval
    jobs: dict[str, list[dict[str, Any]]] = {}
    for target in targets:
        labels = {"cluster": cluster, **dict(target.labels)}
        jobs.setdefault(target.job, []).append({"targets": [target.address], "labels": labels})
    config: dict[str, Any] = {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": timeout,
            "evaluation_interval": evaluation_interval or scrape_interval,
        },
        "rule_files": list(rule_files),
        "scrape_configs": [{"job_name": job, "static_configs": static} for job, static in jobs.items()],
    }
    for key, value in (extra_config or {}).items():
        if key == "scrape_configs":
            config["scrape_configs"].extend(value)
        elif isinstance(value, Mapping) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def _copy_rules(rule_files: Iterable[str | os.PathLike[str]], directory: Path, alert_for: str | None,
                evaluation_interval: str | None = None) -> list[str]:
    """Copy rule files into directory/rules; with `alert_for`, every alert's `for` is replaced (fast tests). A
    group's own `interval` is dropped where the evaluation interval is shorter (a 1 s test server must not wait
    15 s for the normalised series) and kept where it is longer: a config written for `--scrape-interval 1m` kept
    the normalisation group's 15 s, which holds every GPU reading's age within the controller's --stale-after,
    only in the printed config, and evaluated it every minute in the one `--out` wrote."""
    rules_dir = directory / "rules"
    rules_dir.mkdir(parents=True, exist_ok=True)
    evaluate_s = parse_duration(evaluation_interval) if evaluation_interval else 0.0
    names = []
    for source in map(Path, rule_files):
        content = source.read_text()
        doc = yaml.safe_load(content) if alert_for is not None or "interval:" in content else None
        if doc is not None:
            for group in doc.get("groups", []):
                if "interval" in group and not _shorter(group["interval"], evaluate_s):
                    del group["interval"]
                for rule in group.get("rules", []):
                    if "alert" in rule and alert_for is not None:
                        rule["for"] = alert_for
            content = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
        (rules_dir / source.name).write_text(content)
        names.append(f"rules/{source.name}")
    return names


def _shorter(interval: Any, than_s: float) -> bool:
    """Whether a group's `interval` (a Prometheus duration) is shorter than `than_s` seconds."""
    try:
        return parse_duration(str(interval)) < than_s
    except ValueError:
        return False


def write_config(
    directory: str | os.PathLike[str],
    targets: Sequence[Target],
    rule_files: Iterable[str | os.PathLike[str]] = (),
    *,
    alert_for: str | None = None,
    **options: Any,
) -> Path:
    """Write directory/prometheus.yml and directory/rules/*.yaml; return the config path.

    `options` are those of `build_config` (scrape_interval, evaluation_interval, cluster, extra_config).
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    names = _copy_rules(rule_files, out, alert_for,
                        options.get("evaluation_interval") or options.get("scrape_interval", "5s"))
    path = out / "prometheus.yml"
    path.write_text(yaml.safe_dump(build_config(targets, names, **options), sort_keys=False))
    return path


class PrometheusServer:
    """The real Prometheus on 127.0.0.1:<port>, started by `start()` or `with`, stopped by `stop()`."""

    def __init__(
        self,
        scrape_targets: Sequence[Target],
        rule_files: Iterable[str | os.PathLike[str]] = (),
        scrape_interval: str = "5s",
        evaluation_interval: str | None = None,
        extra_config: Mapping[str, Any] | None = None,
        binary: str = "prometheus",
        retention: str = "1d",
        port: int | None = None,
        directory: str | os.PathLike[str] | None = None,
        cluster: str = "local",
        alert_for: str | None = None,
        ready_timeout: float = 30.0,
    ) -> None:
        self.targets = list(scrape_targets)
        self.rule_files = [Path(p) for p in rule_files]
        self.binary = binary
        self.retention = retention
        self.ready_timeout = ready_timeout
        self.port = port or free_port()
        self._fixed_port = port is not None
        self._options = {
            "scrape_interval": scrape_interval,
            "evaluation_interval": evaluation_interval,
            "cluster": cluster,
            "extra_config": extra_config,
        }
        self._alert_for = alert_for
        self._own_dir = directory is None
        # absolute: the binary runs with this directory as its cwd, where a relative config path would not resolve
        self.directory = Path(directory).resolve() if directory else Path(tempfile.mkdtemp(prefix="gputide-prom-"))
        self.config_path = write_config(self.directory, self.targets, self.rule_files, alert_for=alert_for,
                                        **self._options)
        self.data_dir = self.directory / "data"
        self.log_path = self.directory / "prometheus.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> PrometheusServer:
        try:
            self.start()
        except BaseException:  # __exit__ does not run for a failed __enter__: the temporary directory would stay
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.cleanup()

    def start(self) -> PrometheusServer:
        """Start the binary and wait for /-/ready. A port taken meanwhile is retried on a fresh one."""
        path = shutil.which(self.binary)
        if path is None:
            raise PrometheusNotInstalled(f"'{self.binary}' not found on PATH; {INSTALL_HINT}")
        for attempt in range(3):
            self._spawn(path)
            try:
                self._wait_ready()
                return self
            except PrometheusServerError:
                in_use = "address already in use" in self.log_tail()
                self.stop()
                if in_use and self._fixed_port:
                    raise PortInUse(f"127.0.0.1:{self.port} is already in use; choose another port, or none "
                                    "for a free one") from None
                if not in_use or attempt == 2:
                    raise
                self.port = free_port()
            except BaseException:  # Ctrl-C or a SIGTERM turned into one while it starts: no Prometheus left behind
                self.stop()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _spawn(self, path: str) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            path,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--storage.tsdb.retention.time={self.retention}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
        ]
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.directory)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                raise PrometheusServerError(f"prometheus exited during startup:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise PrometheusServerError(f"prometheus not ready after {self.ready_timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds. The data directory is kept (see `restart`)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self) -> None:
        """Stop and start on the same port with the same data (fault injection: Prometheus restarts)."""
        self.stop()
        fixed, self._fixed_port = self._fixed_port, True
        try:
            self.start()
        finally:
            self._fixed_port = fixed

    def cleanup(self) -> None:
        """Remove the temporary directory (only one this object created)."""
        if self._own_dir and not self.running:
            shutil.rmtree(self.directory, ignore_errors=True)

    def reload(self, targets: Sequence[Target] | None = None) -> None:
        """Rewrite the config (optionally with new targets) and POST /-/reload; raise if Prometheus refuses."""
        if targets is not None:
            self.targets = list(targets)
        write_config(self.directory, self.targets, self.rule_files, alert_for=self._alert_for, **self._options)
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                if response.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            raise PrometheusServerError(f"reload refused: {exc.read().decode(errors='replace')}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise PrometheusServerError(f"reload failed: {exc}") from exc

    def _api(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            raise PrometheusServerError(f"{path}: {exc.read().decode(errors='replace')}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise PrometheusServerError(f"{path}: {exc}") from exc
        if body.get("status") != "success":
            raise PrometheusServerError(f"{path}: {body.get('error')}")
        return body["data"]

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; the `result` list (each item has `metric` and `value` [ts, "string"])."""
        params = {"query": promql, **({"time": str(at)} if at is not None else {})}
        data = self._api("/api/v1/query", params)
        return data["result"] if isinstance(data["result"], list) else [{"metric": {}, "value": data["result"]}]

    def alerts(self) -> list[dict[str, Any]]:
        """Prometheus's own /api/v1/alerts: each has labels, annotations, state (pending/firing), value."""
        return list(self._api("/api/v1/alerts")["alerts"])

    def targets_health(self) -> dict[str, str]:
        """scrapeUrl -> health ("up", "down", "unknown") of the active targets."""
        active = self._api("/api/v1/targets")["activeTargets"]
        return {t["scrapeUrl"]: t["health"] for t in active}

    def wait_for(
        self,
        promql: str,
        predicate: Callable[[list[dict[str, Any]]], bool] = bool,
        timeout: float = 15.0,
        interval: float = 0.25,
    ) -> list[dict[str, Any]]:
        """Poll `query(promql)` until `predicate(result)` holds; TimeoutError with the last result otherwise."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while True:
            result = self.query(promql)
            if predicate(result):
                return result
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{promql!r}: condition not met after {timeout:.0f} s; last result {result}")
            time.sleep(interval)
