"""`gputide power-cap-agent`: apply the power limits the controller asked for on this node's GPUs.

    gputide power-cap-agent --node NAME [--kubeconfig PATH] [--interval 10s] [--port 9837] [--state-file PATH]
                            [--once]

On Kubernetes the controller's `SetPowerLimit` writes `{GPU UUID: watts}` into the node annotation
`gputide.io/power-caps`; nothing on the node acts on an annotation by itself. This agent, one per GPU node (the
`power-cap-agent` container of `deploy/components/power-cap`, root with CAP_SYS_ADMIN and not privileged: setting a
power limit needs root and CAP_SYS_ADMIN on the device), reads its node's annotation every `--interval`
(`NodeAnnotationCaps`, read-only `get` on its node), and applies it through NVML (`NvmlBackend.apply_power_caps`)
as `exporters.power_caps.PowerCapAgent` says: never above a GPU's default limit, nor above the limit the GPU ran
at before gputide's first cap (an operator's ``nvidia-smi -pl``; a give-back puts that limit back), a cap raised by
hand applied again, an entry removed given back; an unreadable or malformed annotation changes nothing. The limits
found before gputide's caps are kept in `--state-file` (a JSON file on the node, a hostPath; a GPU found at the first
cap asked, below its default, with nothing kept there is the operator's: not asked, left in force by the give-back.
Without one they are kept in memory, and a restarted agent, which finds its own cap so, gives a GPU capped before its
restart back to the default limit); what it applied is kept only while it runs: it applies the whole annotation when
it starts, and removing it leaves the limits it set (NVML keeps them until the driver reloads): delete the annotation
first.

NVML can stop answering under the agent (another user of the library in the process shut it down, the driver
unloaded or reloaded): a sync that finds it so changes no limit and fails (counted, logged once), and each later sync
first tries once to initialise NVML again (`exporters.backends.nvml_init`). The first that succeeds finds the GPUs
again by UUID and applies the annotation through the new handles: a cap the reload put back to the default is
applied again (counted in `caps_lost_total`), a GPU NVML no longer names is no GPU of the node, one it finds is.

The caps expire: the controller writes `gputide.io/power-caps-until` with them and renews it while it still wants
them (`balancer.actuate.k8s_nodes`); once it has passed by this node's clock (plus `EXPIRY_MARGIN_S`, 60 s, for a
node clock ahead of the controller's), the agent gives the node's caps back as a give-back would (never over a limit
set by hand since), logs a WARNING naming the node, the GPU and the expiry, and counts it. So a controller that
died, was uninstalled without cleaning up, or whose leader is stuck leaves no cap for longer than its TTL (15
minutes by default). Caps written without an expiry (an older controller) never expire.

`/metrics` on `--port` (0: off): `gputide_power_cap_agent_applied_watts{UUID}` (the last limit applied to each GPU),
`gputide_power_cap_agent_caps_lost_total{UUID}` (caps found no longer in force, the GPU above them after an
``nvidia-smi -pl``, a GPU reset or a driver reload, and applied again),
`gputide_power_cap_agent_caps_expired_total{UUID}` (caps whose expiry passed without the controller renewing it,
given back; once per GPU and expiry; published at 0 for every GPU NVML names when the agent starts, and for one it
names later once a cap is applied to it: a counter first published at 1 is no increase to `GputidePowerCapsExpired`),
`gputide_power_cap_agent_limit_before_watts{UUID}` (one per GPU under gputide's cap, a first cap whose Set has not
returned included: the limit its give-back restores, as the state file keeps it, or memory without one; none for a
GPU whose first cap the driver refused, nor, with a state file, for one found already at the first cap asked, below
its default, with nothing written down: taken for the operator's limit; either is kept there as a refused first cap,
whose give-back restores nothing; a lower cap asked of the operator's GPU, not refused, puts it under gputide's cap,
served with the operator's limit),
`gputide_power_cap_agent_last_sync_timestamp_seconds` and `gputide_power_cap_agent_syncs_total{result}` (`applied`,
`unchanged`, `failed`: the annotation unreadable or malformed, NVML refusing a GPU or not answering at all, a GPU's
limit unreadable, or the state file unwritable; alert `GputidePowerCapAgentFailing`; the log says why, once per
reason, and when syncs complete again). The exporter's next scrape reports the new limit as
`DCGM_FI_DEV_POWER_MGMT_LIMIT`.
The same port serves the probes (`balancer.app.health`, `AgentHealth`): `/healthz` fails once no sync has ended
(whatever its result) for `stall_limit_s` (60 s at the default 10 s interval), so the kubelet restarts an agent
stuck in a call (its metrics thread would keep answering, `up` stay 1 and no alert fire); and once one of its NVML
calls on a GPU has been inside NVML that long. Those run in each GPU's own job with a deadline
(`exporters.backends.nvml_gpu_reads`): a Set that never returns (a GPU in recovery) leaves the sync ending, the Set
pending and the GPU stuck, so the sync's beat alone never failed the probe and the agent was never restarted;
`/readyz` once a sync has ended.
Exit codes: 0 stopped by SIGTERM/SIGINT (or `--once` done), 1 `--once` and its sync failed (logged), 2 bad input
(a flag's value, `--state-file` included: a file path whose folder the agent can write in, or, where that folder is
missing, whose nearest existing folder it can write in, as each write creates the folders missing; checked before any
GPU is touched) or NVML unusable here (libnvidia-ml.so.1 not loadable, the driver not loaded, the GPU devices not
open to this process: said with pynvml's error, as the exporter exits without it).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from balancer.app.health import Health, call_budget_s
from balancer.app.health import app as probes_app
from balancer.cmd._args import add_listen_address, bind, duration_between, given, k8s_name
from balancer.errors import InputError
from exporters.health import WatchedCalls

log = logging.getLogger("gputide.power_cap_agent")


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.applied = Gauge("gputide_power_cap_agent_applied_watts", "The power limit last applied to a GPU.",
                             ["UUID"], registry=registry)
        self.last_sync = Gauge("gputide_power_cap_agent_last_sync_timestamp_seconds",
                               "When the agent last read its node's requested caps.", registry=registry)
        self.syncs = Counter("gputide_power_cap_agent_syncs", "Syncs by result: applied (a limit changed), "
                             "unchanged, failed (the node's caps unreadable or malformed, NVML refused a GPU "
                             "or does not answer).",
                             ["result"], registry=registry)
        self.lost = Counter("gputide_power_cap_agent_caps_lost", "Caps found no longer in force (the GPU above "
                            "them: nvidia-smi -pl, a GPU reset, a driver reload) and applied again.", ["UUID"],
                            registry=registry)
        self.expired = Counter("gputide_power_cap_agent_caps_expired", "Caps whose expiry passed without the "
                               "controller renewing it (stopped, uninstalled, no working leader), given back.",
                               ["UUID"], registry=registry)
        self.before = Gauge("gputide_power_cap_agent_limit_before_watts", "Per GPU under gputide's cap (a first cap "
                            "whose Set has not returned included): the limit it ran at before, which giving the cap "
                            "back restores. None for a GPU whose first cap the driver refused, nor, with a state "
                            "file, for one found already at the first cap asked with nothing recorded (taken for the "
                            "operator's limit): no cap of gputide's is in force there, and its give-back restores "
                            "nothing.", ["UUID"], registry=registry)
        for result in ("applied", "unchanged", "failed"):
            self.syncs.labels(result=result)
        self.failure: str | None = None   # why the last sync failed, logged once per reason

    def seen(self, uuids: Iterable[str]) -> None:
        """Publish these GPUs' expiry counters at 0 (those already published keep their count). A counter first
        published at 1 (created by its first `.inc()`) is no increase to Prometheus: `increase()` needs an earlier
        sample, so a GPU's first expiry went unseen by GputidePowerCapsExpired."""
        for uuid in uuids:
            self.expired.labels(UUID=uuid)

    def failed(self, why: str) -> None:
        self.syncs.labels(result="failed").inc()
        if why != self.failure:
            log.error("power caps sync failed (tried again every interval; logged again when the reason "
                      "changes): %s", why)
        self.failure = why

    def held(self, agent: Any) -> None:
        """The GPUs the agent holds under its cap, with the limit each is given back to. A GPU whose first cap the
        driver refused or, with a state file, was found in force already (`Held.refused` either way) is under none,
        and its give-back restores nothing: its record stays in the state file while the cap is asked and while its
        give-back lasts, its limit before no longer followed then (served, an operator's ``-pl 300`` after the
        give-back left it saying 700 W would be restored)."""
        before = getattr(agent, "before", None)
        if before is None:
            return
        self.before.clear()
        for uuid, held in before.items():
            if not held.refused:
                self.before.labels(UUID=uuid).set(held.before_w)


def gpus_named(target: Any) -> set[str]:
    """The GPUs the target names (NVML's `power_limits()`), or none when it names none or cannot say now (NVML not
    answering: the GPUs are then seen as they are capped)."""
    limits = getattr(target, "power_limits", None)
    try:
        return set(limits()) if callable(limits) else set()
    except Exception as exc:   # noqa: BLE001 - NVML's errors; the sync that follows reports them
        log.debug("GPUs not listed at start: %s", exc)
        return set()


def sync_once(agent: Any, metrics: AgentMetrics, clock=time.time) -> dict[str, float]:
    """One read-and-apply; what was applied (UUID -> watts). A failure (the node's caps unreadable or malformed,
    NVML refusing a GPU or not answering, anything raised) is counted and logged, not raised: the next interval tries
    again (and initialises NVML again where it stopped answering: `exporters.backends.nvml_init`)."""
    try:
        applied = agent.sync()
    except Exception as exc:   # noqa: BLE001 - an NVML or API failure must not stop the agent
        metrics.failed(f"power caps not applied: {exc}")
        return {}
    finally:   # an expiry is found (and logged) once: counted even if what followed raised
        for uuid in getattr(agent, "expired", ()):
            metrics.expired.labels(UUID=uuid).inc()
    metrics.seen(applied)   # a GPU first capped now: its expiry counter at 0 before its cap can expire
    for uuid, watts in applied.items():
        metrics.applied.labels(UUID=uuid).set(watts)
    for uuid in getattr(agent, "lost", ()):
        metrics.lost.labels(UUID=uuid).inc()
    metrics.held(agent)
    if why := getattr(agent, "failed", None):
        metrics.failed(why)
        return applied
    if metrics.failure is not None:
        log.info("power caps sync complete again (it had failed: %s)", metrics.failure)
        metrics.failure = None
    metrics.last_sync.set(clock())
    metrics.syncs.labels(result="applied" if applied else "unchanged").inc()
    if applied:
        log.info("applied power caps: %s", applied)
    return applied


NVML_ALLOWANCE_S = 30.0   # NVML's calls, each GPU's under the reads' deadline (a stuck one is `AgentHealth`'s)
LEAST_STALL_S = 60.0


def stall_limit_s(interval_s: float, read_s: float) -> float:
    """How long the agent may go without ending a sync before it counts as stuck: the wait, the node's read to its
    deadline (`read_s`: every try of the API call, `NodeAnnotationCaps`) and NVML's calls, at least five intervals
    and a minute. Failures are not stuck (an alert watches them): a restart would not mend an API server down."""
    return max(5.0 * interval_s, LEAST_STALL_S, interval_s + read_s + NVML_ALLOWANCE_S)


class AgentHealth(Health):
    """`Health` that also fails liveness once an NVML call on a GPU (run inside `watching`: the backend's
    `GpuReads.watching`, `watch_nvml`) has been inside NVML for `stall_after_s`: such a call leaves its sync ending
    (the Set pending, its GPU stuck), so the beats alone kept a hung agent live for good."""

    def __init__(self, stall_after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(stall_after_s, clock)
        self._calls = WatchedCalls(lambda: self.clock())   # NVML calls in flight: when each began, and what it is

    def watching(self, what: str) -> contextlib.AbstractContextManager[None]:
        return self._calls.watching(what)

    def live(self) -> tuple[bool, str]:
        oldest = self._calls.oldest()
        if oldest is not None and (age := self.clock() - oldest[0]) > self.stall_after_s:
            return False, f"stuck: {oldest[1]} has been inside NVML for {age:.0f} s (limit {self.stall_after_s:.0f} s)"
        return super().live()


def watch_nvml(backend: Any, health: AgentHealth, interval_s: float = 0.0) -> None:
    """The backend's per-GPU NVML calls run inside `health.watching` (a backend without them, sim, left alone), and
    a limit read that missed its deadline is used at the next sync, `interval_s` later, once it has returned (a GPU
    slower than the deadline: `exporters.backends.nvml_power`), not dropped as too old (`agent_syncs_every`: the
    reads' own `max_age_s`, which says when a call counts as stuck, is left as it is)."""
    reads = getattr(backend, "reads", None)
    if reads is not None:
        reads.watching = health.watching
        if interval_s > 0:
            backend.agent_syncs_every(interval_s)


def run_agent(agent: Any, metrics: AgentMetrics, interval_s: float, stop: threading.Event,
              beat=lambda: None) -> None:
    """Sync every `interval_s` until `stop`; `beat()` after every sync, whatever its result (the liveness probe)."""
    while not stop.is_set():
        sync_once(agent, metrics)
        beat()
        stop.wait(interval_s)


def serve_with_probes(registry: CollectorRegistry, health: Health, port: int, addr: str = "0.0.0.0"):
    """/metrics as the exporter writes it (`exporters.server`), /healthz and /readyz from `health`."""
    from exporters.server import metrics_app, serve_app

    metrics, probes = metrics_app(registry), probes_app(health, registry)

    def dispatch(environ, start_response):
        probe = environ.get("PATH_INFO", "/") in ("/healthz", "/readyz")
        return (probes if probe else metrics)(environ, start_response)

    return serve_app(dispatch, port=port, addr=addr, name="gputide-power-cap-agent")


LEAST_AGENT_INTERVAL_S = 1.0   # every GPU node reads its Node each interval: 1000 nodes at 1s, 1000 GETs a second


def agent_interval(text: str) -> float:
    """Seconds between the agent's reads, from `LEAST_AGENT_INTERVAL_S` (`--interval 1e-320` passed: a busy loop of
    API reads) to a third of the caps' expiry (`POWER_CAP_TTL_S`, 15 minutes, the least a controller writes): the
    agent sees an expiry only when it reads, so the day allowed before kept a cap its controller no longer renewed up
    to a day past its expiry, and applied a new cap as late. A third: at most 5 minutes (plus `EXPIRY_MARGIN_S`)."""
    from balancer.actuate.k8s_nodes import POWER_CAP_TTL_S

    most = POWER_CAP_TTL_S / 3
    return duration_between(text, "--interval", LEAST_AGENT_INTERVAL_S, most, f"a duration from "
                            f"{LEAST_AGENT_INTERVAL_S:g}s to {most:g}s (a third of the power caps' "
                            f"{POWER_CAP_TTL_S / 60:g}-minute expiry), such as 10s")


NODE_NAME = "this node's name (the DaemonSet passes $(NODE_NAME))"


# what the agent needs beyond the GPU devices where NVML answers NoPermission or Unknown
# (`exporters.backends.nvml.started`)
ROOT_WITH_CAP_SYS_ADMIN = (", and run it as root with CAP_SYS_ADMIN, as the power-cap component does "
                           "(deploy/components/power-cap)")


def nvml_backend() -> Any:
    """The NVML backend the caps are applied through; exit 2 where NVML cannot be used here, started as the exporter's
    (`exporters.backends.nvml.started`: pynvml missing, or an NVML error at its start, said as what is missing and
    what to do, after this command's words, not the exporter's invalid `--backend nvml`, a flag this command does
    not have). Anything else (an AttributeError, a bug) is raised as it is, not bad input."""
    from exporters.backends.nvml import started

    return started("power-cap-agent applies the caps through NVML", ROOT_WITH_CAP_SYS_ADMIN)


STATE_FILE = ("a file path, not a folder, whose folder this process can write in or, where that folder is missing, "
              "whose nearest existing folder it can (each write creates the folders missing; the file itself need "
              "not exist)")


def not_a_folder(above: Path) -> str:
    """Why `--state-file`'s nearest existing folder is none: a file, or a link to nothing (its target missing: a
    mount not there, a folder removed), which no write creates."""
    if above.is_symlink() and not above.exists():
        return f"under a link whose target is missing: {above} -> {os.readlink(above)}"
    return f"under a file, not a folder: {above}"


def state_file(path: str | None) -> None:
    """`--state-file` checked before any GPU is touched: the limits before gputide's caps are written to a temporary
    file beside it renamed over it, after creating the folders missing (`LimitsBefore._save`), so a folder there,
    or a nearest existing folder that is a file or one this process cannot write in, failed every write once a GPU
    was capped (each sync counted failed, the limits kept in memory only, a restarted agent giving a GPU back to its
    default limit). A missing folder is no fault: the DaemonSet's hostPath makes it, and a bare host's first write
    did (refusing it stopped `--state-file /var/lib/gputide/power-cap-agent/limits.json` on such a host). A link
    whose target is missing (`/var/lib/gputide -> /mnt/not-mounted/gputide`) is there, not missing: `exists()`
    follows it, so the check went on to the link's folder and took it, and each write failed (the folders' creation
    meets the link, FileExistsError)."""
    if path is None:
        return
    target, where = Path(path), ""
    try:
        if target.is_dir():
            raise InputError(None, "--state-file", path, STATE_FILE, "a folder")
        above = next(p for p in target.parents   # the nearest existing, a broken link included: / at worst
                     if p.exists() or p.is_symlink() or p == p.parent)
        if above != target.parent:
            where = f" in {above}, the nearest folder that exists"
        if not above.is_dir():
            raise InputError(None, "--state-file", path, STATE_FILE, not_a_folder(above))
        with tempfile.NamedTemporaryFile(dir=above, prefix=".gputide-probe-"):
            pass
    except OSError as exc:   # EACCES, EROFS
        raise InputError(None, "--state-file", path, STATE_FILE, f"{exc.strerror or exc}{where}") from exc


def run(args: argparse.Namespace) -> int:
    from balancer.cmd._args import kube_client
    from exporters.power_caps import PowerCapAgent
    from exporters.power_limits_before import LimitsBefore

    if not args.node.strip():   # blank: no node's name either
        raise InputError(None, "--node", args.node, NODE_NAME)
    k8s_name(args.node, "--node", NODE_NAME)   # no Node has another: its GET would 404 (or 422) at every read
    if not 0 <= args.port <= 65535:
        raise InputError(None, "--port", args.port, "0..65535")
    interval = agent_interval(args.interval)
    state_file(args.state_file)   # before any GPU is touched
    api = kube_client(args.kubeconfig, "a usable Kubernetes configuration (in-cluster or --kubeconfig)")
    from balancer.actuate.k8s_nodes import NodeAnnotationCaps

    source = NodeAnnotationCaps(api, args.node)
    if not args.state_file:
        log.warning("no --state-file: the limits found before gputide's caps are kept in memory only")
    backend = nvml_backend()
    agent = PowerCapAgent(source, backend, LimitsBefore(args.state_file or None))
    registry = CollectorRegistry()
    metrics = AgentMetrics(registry)
    metrics.seen(gpus_named(backend))   # every GPU's expiry counter at 0 before the first sync can count an expiry
    if args.once:
        sync_once(agent, metrics)
        return 1 if metrics.failure else 0   # a script (a node's uninstall step, a check) must see it fail
    health = AgentHealth(stall_limit_s(interval, call_budget_s(source.api)))
    watch_nvml(backend, health, interval)
    server = bind(lambda **kw: serve_with_probes(registry, health, **kw), args.listen_address, args.port) \
        if args.port else None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("applying the power caps requested for node %s every %.0f s (liveness limit %.0f s)", args.node,
             interval, health.stall_after_s)
    try:
        run_agent(agent, metrics, interval, stop, beat=health.beat)
    finally:
        if server is not None:
            server.close()
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("power-cap-agent", help="apply the controller's requested GPU power limits on this node",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--node", default="", help="this node's name (required)")
    p.add_argument("--kubeconfig", type=given("--kubeconfig"), default=None,
                   help="kubeconfig (default: in-cluster, $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--interval", default="10s",
                   help="time between reads of the node's caps (default 10s; 1s to 5m, a third of the caps' expiry)")
    p.add_argument("--port", type=int, default=9837,
                   help="serve /metrics, /healthz and /readyz here (0: off; default 9837)")
    p.add_argument("--state-file", type=given("--state-file"), default=None,
                   help="JSON file keeping each GPU's power limit from before gputide's cap across restarts "
                        "(a hostPath; a file path whose folder, or nearest existing folder, the agent can write in: "
                        "missing folders are created; default: memory only)")
    add_listen_address(p)
    p.add_argument("--once", action="store_true", help="read and apply once, then exit")
    p.set_defaults(func=run)
