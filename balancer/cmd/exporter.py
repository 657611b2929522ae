"""`gputide exporter`: serve dcgm-exporter-compatible GPU series from NVML or a simulated fleet.

    gputide exporter --backend sim --port 9400 [--fleet SPEC.yaml] [--node NAME] [--speed 60] [--seed 0]
    gputide exporter --backend nvml --port 9400 [--listen-address ::]
                     [--power-caps-file /run/gputide/caps.json [--caps-interval 10]]
                     [--pod-resources-socket /var/lib/kubelet/pod-resources/kubelet.sock] [--stuck-after 5m]
                     [--collect-timeout 8s] [--serve-stale-for 30s]

The sim backend runs the fleet (default: the built-in demo fleet with a default workload mix) and advances it
with wall-clock time x ``--speed`` (at most 1000, `MOST_SPEED`: faster, a scrape's catching up outruns
``--collect-timeout``). ``--power-caps-file`` turns on the power-cap agent: the JSON file
``{"GPU-uuid": watts}`` is re-read every ``--caps-interval`` seconds and applied (clamped) to the GPUs. Its syncs are
those of `gputide power-cap-agent` (`power_cap_agent.sync_once`), with its metrics on the exporter's port
(`gputide_power_cap_agent_syncs_total{result}`, ...): a sync that fails (the file malformed, NVML refusing a GPU,
anything raised) is logged and counted, and the exporter goes on serving and tries again at the next interval.
``--pod-resources-socket`` (nvml backend, on a Kubernetes node) attributes pods to GPUs from the kubelet's
PodResources API and publishes them as ``gputide_gpu_workload_info`` (exporters/podresources.py); without it a
real node's GPUs carry no pods and the controller can throttle them but not move what runs on them. The kubelet is
asked inside each collection, for at most half of ``--collect-timeout`` (5 s at most): a kubelet slow to answer
costs the scrape its pods (``gputide_pod_resources_up`` 0, the last answer kept for a minute), never its GPUs.

The port also answers the kubelet's probes without reading NVML (exporters/health.py): ``/healthz`` fails once a
collection (a scrape's NVML read) has been running for longer than ``--stuck-after`` (default 5m), ``/readyz``
answers 200 once a collection has succeeded and fails while one outruns ``--collect-timeout``; the exporter collects
once as it starts, so it becomes ready without waiting for a scrape. A scrape waits for a collection at most
``--collect-timeout`` (8s), then gets the last complete one if it began within ``--serve-stale-for`` (30s), else 503.
With ``--power-caps-file`` the agent's sync shares NVML with the collections and is held to the same limits, scraped
or not: one stuck in a power-limit call fails ``/readyz`` after ``--collect-timeout`` and ``/healthz`` after
``--stuck-after``; a cap is recorded as applied only once NVML confirmed it.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time

from prometheus_client import CollectorRegistry

from balancer.cmd._args import (
    LEAST_INTERVAL_S,
    MOST_INTERVAL_S,
    add_listen_address,
    bind,
    duration_between,
    given,
    host_port,
    number,
    only_with,
    seed,
    watched_file,
)
from balancer.errors import InputError
from exporters.health import DEFAULT_COLLECT_TIMEOUT_S

log = logging.getLogger("gputide.exporter")

# --speed's ceiling. Each scrape first steps the simulator (a minute a step) up to wall-clock time x speed, and waits
# --collect-timeout (8 s) for it: the gap between two scrapes x speed is stepped in one go. Measured on a loaded
# 2-core machine with the built-in demo fleet (256 GPUs): ~0.6 to 2 ms a step, 30,000 to 100,000 simulated seconds
# per wall second at best; at 100,000 scrapes 5 s apart took 5 to 8 s and then timed out, at 1e300 catching up
# never ended (every scrape 503, and exit 0 all the same), and even at 3,600 one scrape after a 60 s gap took 4 to
# 7 s. At 1,000 (a day in under a minute and a half) the longest gap `gputide prometheus --scrape-interval` allows,
# 90 s, is 1,500 steps: about 1 s measured on that loaded machine, margin for a larger --fleet or a busier one.
MOST_SPEED = 1_000.0
# Defaults of the flags that mean something only with another: each defaults to None (then to this, once checked),
# so one given where nothing reads it is refused (`only_where_read`), not ignored
SIM_DEFAULTS = {"speed": 60.0, "seed": 0}   # the simulated fleet's: NVML serves this machine's GPUs
CAPS_INTERVAL_S = 10.0   # the power-cap agent's, which runs only with --power-caps-file
# the flags only the sim backend reads: {flag: (attribute, default)}
SIM_ONLY = {"--fleet": ("fleet", None), "--node": ("node", None), "--speed": ("speed", SIM_DEFAULTS["speed"]),
            "--seed": ("seed", SIM_DEFAULTS["seed"])}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("exporter", help="serve GPU metrics (dcgm-exporter names) from NVML or a simulated fleet",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["sim", "nvml"], default="sim")
    p.add_argument("--port", type=int, default=9400, help="TCP port (0: pick a free one and print it)")
    add_listen_address(p, "--listen", dest="listen")
    p.add_argument("--fleet", type=given("--fleet"),
                   help="fleet spec YAML for the sim backend (default: the built-in demo fleet)")
    p.add_argument("--node", type=given("--node", "a name"), help="sim backend: serve only this node's GPUs")
    p.add_argument("--speed", type=float, default=None,
                   help=f"sim backend: simulated seconds per wall second, 0 to {MOST_SPEED:g} (0: the simulated clock "
                        "stands still; faster, the simulator cannot keep up with the scrapes; default "
                        f"{SIM_DEFAULTS['speed']:g})")
    p.add_argument("--seed", type=int, default=None,
                   help=f"sim backend: the simulated workloads' random seed (default {SIM_DEFAULTS['seed']})")
    p.add_argument("--power-caps-file", type=given("--power-caps-file"),
                   help="JSON {GPU-uuid: watts} to apply as power limits (agent mode)")
    p.add_argument("--caps-interval", type=float, default=None,
                   help=f"with --power-caps-file: seconds between its reads (0.05 to 86400; default "
                        f"{CAPS_INTERVAL_S:g})")
    p.add_argument("--duration", type=float, default=0.0, help="exit after this many seconds (0: run forever)")
    p.add_argument("--hostname", type=given("--hostname", "a node name"), default=None, metavar="NAME",
                   help="nvml backend: the Hostname label of every series, the node's name (default: $NODE_NAME, "
                        "else this machine's hostname; in a pod that is the pod's name, so the DaemonSet passes it)")
    p.add_argument("--pod-resources-socket", type=given("--pod-resources-socket"), default=None, metavar="PATH",
                   help="nvml backend: the kubelet's PodResources socket, to publish which pod holds which GPU "
                        "(e.g. /var/lib/kubelet/pod-resources/kubelet.sock; default: off)")
    p.add_argument("--stuck-after", default="5m", metavar="DURATION",
                   help="/healthz fails once a collection has been running this long (NVML calls have no timeout; "
                        "a healthy read takes well under a second): 30s, 5m, ... (default: 5m)")
    p.add_argument("--collect-timeout", default="8s", metavar="DURATION",
                   help="how long a scrape waits for a collection before it is served the last complete one (or a "
                        "503); keep it under Prometheus's scrape_timeout and under --stuck-after (default: 8s)")
    p.add_argument("--serve-stale-for", default="30s", metavar="DURATION",
                   help="past --collect-timeout, serve the last complete collection while it began at most this long "
                        "ago, else answer 503: 0s to always answer 503 (default: 30s)")
    p.set_defaults(func=run)


def nvml_backend(hostname: str | None = None):
    """The NVML backend; exit 2 where NVML cannot be used here (`exporters.backends.nvml.started`, as the power-cap
    agent starts it): pynvml missing, or an NVML error at its start, said in one line as what is missing and what to
    do (NoPermission: the GPU devices, not a node with a driver, which it has) rather than as pynvml's traceback.
    Anything else (an AttributeError, a bug) is raised as it is: catching every exception said a bug as bad input."""
    from exporters.backends.nvml import started

    return started("exporter --backend nvml reads this machine's GPUs through NVML",
                   ", as the exporter's DaemonSet does (deploy/base/exporter.yaml)", hostname=hostname)


def _check(args: argparse.Namespace) -> None:
    """The command-line values, before a fleet is built or a port bound."""
    if not 0 <= args.port <= 65535:
        raise InputError(None, "--port", args.port, "0..65535")
    if args.seed is not None:
        seed(args.seed)
    if args.speed is not None:
        number(args.speed, "--speed", 0, MOST_SPEED, unit=" (simulated seconds per wall second; faster, the "
               "simulator cannot catch up between scrapes and every scrape times out)")
    number(args.duration, "--duration", 0, unit=" (0: run forever)")
    if args.caps_interval is not None:
        number(args.caps_interval, "--caps-interval", LEAST_INTERVAL_S, MOST_INTERVAL_S,
               unit=" (seconds: 24h at most, and no busy loop)")
    collect_timeouts(args)
    watched_file(args.power_caps_file, "--power-caps-file")
    only_where_read(args)


def only_where_read(args: argparse.Namespace) -> None:
    """A flag given where nothing reads it is refused, naming what it needs, and one left out set to its default.
    --fleet, --node, --speed and --seed drive the simulated fleet: with --backend nvml, `--speed 600` served real
    GPUs at their own pace and exited 0. --caps-interval paces the power-cap agent, which runs only with
    --power-caps-file: without it, `--caps-interval 1` read no file at all."""
    only_with(args, SIM_ONLY, args.backend != "nvml", "only with --backend sim (NVML serves this machine's GPUs)")
    only_with(args, {"--caps-interval": ("caps_interval", CAPS_INTERVAL_S)}, bool(args.power_caps_file),
              "only with --power-caps-file (it is how often the power-cap agent reads that file; without it no "
              "agent runs)")


def stuck_after_s(args: argparse.Namespace) -> float:
    """``--stuck-after`` in seconds: from 10 s (a slow read is not stuck) to a day."""
    return duration_between(args.stuck_after, "--stuck-after", 10.0, 86400.0, "a duration from 10s to 24h, e.g. 5m")


def collect_timeouts(args: argparse.Namespace) -> dict[str, float]:
    """``--stuck-after``, ``--collect-timeout`` and ``--serve-stale-for`` in seconds, as `CollectHealth` takes them:
    a collection timeout of at least 1 s and under --stuck-after (a scrape must not wait for a collection the probe
    already calls stuck), stale samples served for at most a day."""
    stuck = stuck_after_s(args)
    timeout = duration_between(args.collect_timeout, "--collect-timeout", 1.0, stuck,
                               f"a duration from 1s up to --stuck-after ({stuck:g}s), under Prometheus's "
                               "scrape_timeout, e.g. 8s")
    if timeout >= stuck:
        raise InputError(None, "--collect-timeout", args.collect_timeout,
                         f"a duration under --stuck-after ({stuck:g}s), e.g. 8s")
    stale = 0.0 if args.serve_stale_for.strip() in ("0", "0s") else duration_between(
        args.serve_stale_for, "--serve-stale-for", 0.0, 86400.0, "0s (never), or a duration up to 24h, e.g. 30s")
    return {"stuck_after_s": stuck, "collect_timeout_s": timeout, "serve_stale_s": stale}


def build_backend(args: argparse.Namespace):
    if args.backend == "nvml":
        return nvml_backend(args.hostname or os.environ.get("NODE_NAME") or None)
    if args.hostname:
        raise InputError(None, "--hostname", args.hostname, "only with --backend nvml (the simulated fleet names its "
                                                          "own nodes; --node picks one)")
    from balancer import fleet as fleet_mod
    from balancer.sim import SimCluster, default_mix
    from exporters.backends.sim import SimBackend
    from exporters.sim_caps import SimCapTarget

    fleet = fleet_mod.load(args.fleet) if args.fleet else fleet_mod.demo_fleet()
    if args.node and args.node not in {n.name for n in fleet.nodes}:
        raise InputError(args.fleet or "<built-in demo fleet>", "--node", args.node,
                         "a node of the fleet, e.g. " + fleet.nodes[0].name)
    sim = SimCluster(fleet, seed=args.seed, start_time=time.time() // 60 * 60)
    default_mix(sim)
    sim.step()
    backend = SimBackend(sim, node=args.node, speed=args.speed or None)
    backend.caps_target = SimCapTarget(sim)  # type: ignore[attr-defined]
    return backend


POD_RESOURCES_TIMEOUT_S = 5.0   # the longest the kubelet's PodResources `List` is waited for


def pod_resources_timeout_s(collect_timeout_s: float) -> float:
    """How long a collection waits for the kubelet's `List`: half the collection timeout, at most 5 s. The call is
    made inside the collection, after the NVML read: waited for as long as the collection, a kubelet slow to answer
    made every collection outrun its timeout, so every scrape got a 503 (and /readyz blamed NVML) where its GPUs
    could be served without their pods."""
    return min(POD_RESOURCES_TIMEOUT_S, collect_timeout_s / 2)


def attributed(backend, args: argparse.Namespace, collect_timeout_s: float = DEFAULT_COLLECT_TIMEOUT_S):
    """`backend` with the pods on its GPUs from the kubelet (nvml only: the simulated fleet knows its own), asked
    for at most `pod_resources_timeout_s(collect_timeout_s)`; its `attribution` collects the kubelet's health."""
    if args.backend != "nvml":
        raise InputError(None, "--pod-resources-socket", args.pod_resources_socket,
                         "only with --backend nvml (the sim backend attributes its own pods)")
    from exporters.podresources import Attributed, PodAttribution, PodResourcesClient

    if not os.path.exists(args.pod_resources_socket):
        log.warning("no kubelet PodResources socket at %s yet: GPUs are published without their pods until it "
                    "answers (is /var/lib/kubelet/pod-resources mounted?)", args.pod_resources_socket)
    client = PodResourcesClient(args.pod_resources_socket, timeout_s=pod_resources_timeout_s(collect_timeout_s))
    return Attributed(backend, PodAttribution(client))


def exporter_registry(backend, args: argparse.Namespace, collect_timeout_s: float = DEFAULT_COLLECT_TIMEOUT_S):
    """(the backend the exporter reads, the registry a scrape renders; `collect_timeout_s`: ``--collect-timeout``
    in seconds, which bounds the kubelet's answer). The GPUs are collected before the kubelet's health: reading them
    asks the kubelet, so `gputide_pod_resources_up` says how this scrape's question went (collected first, it said
    the previous scrape's: 0 on the first)."""
    from exporters.collector import GpuCollector

    registry = CollectorRegistry()
    if args.pod_resources_socket:
        backend = attributed(backend, args, collect_timeout_s)
    registry.register(GpuCollector(backend))
    if args.pod_resources_socket:
        registry.register(backend.attribution)
    return backend, registry


def watch_gpu_reads(backend, health, caps_interval_s: float | None = None) -> None:
    """The NVML backend's GPU reads (`exporters.backends.nvml_gpu_reads`) run inside `health.watching`, so a read
    that never returns fails ``/readyz`` after ``--collect-timeout`` and ``/healthz`` after ``--stuck-after`` as a
    stuck collection does (a hung GPU holds no collection open: unwatched, it failed neither probe), and are waited
    for at most 3/8 of the collection timeout: with the kubelet's answer after them (at most half of it,
    `pod_resources_timeout_s`) the collection still ends within it, where the reads' own 3 s outran a
    ``--collect-timeout`` under 4 s. The XID drain's registrations end with that deadline too (at most
    `exporters.backends.nvml.XID_GRACE_S` past it): each took a fresh one, and a collection up to three. A
    collection waits for the power-cap agent's NVML call (the backend's lock) for 1/8 of the collection timeout,
    then fails (`NvmlBusy`) rather than wait for good: with the reads and the kubelet after it the collection ends
    within the timeout, so a scrape is told the agent held NVML (waited for the whole timeout, the collection outran
    it and the scrape read only 'timed out'); an agent's sync takes milliseconds, its calls on a GPU end within the
    reads' deadline (one on a GPU in recovery leaves that GPU stuck, the lock free, and is watched by the probes as
    a read is), so they may hold the lock up to 3/8 of the collection timeout (a slow GPU), and a collection
    meanwhile waits its 1/8 and fails (`NvmlBusy`), and what is no GPU's (initialising NVML again) has no
    deadline. Scrapes meanwhile get what a late collection gets.
    A GPU read that returned late is served at the next collection for ``--serve-stale-for``, as
    a late collection is; the agent's late limit read (`caps_interval_s`: ``--caps-interval``) at its next sync if it
    began at most two intervals ago (`NvmlBackend.agent_syncs_every`), whatever ``--serve-stale-for``: bound by it,
    a GPU slower than the reads' deadline was never capped nor given back at an interval at or above it. A backend
    without such reads (sim) is left as it is."""
    reads = getattr(backend, "reads", None)
    if reads is None:
        return
    reads.watching = health.watching
    reads.timeout_s = min(reads.timeout_s, health.collect_timeout_s * 3 / 8)
    reads.max_age_s = health.serve_stale_s   # a late read served at the next collection: as old as a late one
    backend.lock_timeout_s = health.collect_timeout_s / 8
    if caps_interval_s is not None:
        backend.agent_syncs_every(caps_interval_s)


def run(args: argparse.Namespace) -> int:
    from balancer.cmd.power_cap_agent import AgentMetrics, sync_once
    from exporters.health import CollectHealth, TrackedCollector, first_collection
    from exporters.power_caps import JsonFileCaps, PowerCapAgent
    from exporters.server import serve

    _check(args)
    timeouts = collect_timeouts(args)
    raw = build_backend(args)
    backend, registry = exporter_registry(raw, args, timeouts["collect_timeout_s"])
    health = CollectHealth(**timeouts)
    watch_gpu_reads(raw, health, args.caps_interval)
    server = bind(lambda **kw: serve(registry, health=health, **kw), args.listen, args.port)
    print(f"gputide exporter ({args.backend}) serving {len(backend.identity)} GPUs on "
          f"http://{host_port(server.server.server_address[0], server.port)}/metrics", flush=True)
    first_collection(TrackedCollector(registry, health))
    agent = agent_metrics = None
    if args.power_caps_file:
        if not os.path.isdir(os.path.dirname(os.path.abspath(args.power_caps_file))):
            log.warning("no folder for --power-caps-file %s yet: no power caps are applied until it is written "
                        "there", args.power_caps_file)
        agent = PowerCapAgent(JsonFileCaps(args.power_caps_file), getattr(backend, "caps_target", backend))
        agent_metrics = AgentMetrics(registry)   # served with the GPUs' series
    deadline = time.monotonic() + args.duration if args.duration > 0 else None
    stop = threading.Event()
    try:
        while not stop.is_set():
            if agent is not None:   # its failures (agent.failed, anything raised) are logged and counted
                with health.watching("the power-cap agent's sync"):   # one stuck in NVML fails the probes
                    sync_once(agent, agent_metrics)
            wait = args.caps_interval if agent is not None else 3600.0
            if deadline is not None:
                wait = min(wait, max(deadline - time.monotonic(), 0.0))
                if wait <= 0:
                    break
            stop.wait(wait)
    finally:
        server.close()
    return 0
