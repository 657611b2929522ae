"""Power-cap agent: apply the per-GPU power limits a controller asks for on this node, and give them back.

A *source* answers ``read() -> {uuid: watts}``, or None when it cannot tell (unreadable or malformed: then nothing
changes). `JsonFileCaps` reads a JSON object ``{"GPU-...": 300, ...}`` (or ``{"caps": {...}}``) from a file (a
missing file: no caps); on Kubernetes `balancer.actuate.k8s_nodes.NodeAnnotationCaps` reads the node annotation
the controller's `SetPowerLimit` writes. A *target* sets limits: ``apply_power_caps({uuid: watts})`` returns the
watts it set, each clamped to [the GPU's minimum, its *default* limit], and raises `PowerCapError` (holding what
it did set) when the driver refused some. A target that also answers ``power_limits() -> {uuid: PowerLimit}``
(the NVML backend; the simulated fleet does not) tells the agent which GPUs the node has and where their limits are.

What `PowerCapAgent.sync()` does, each interval:

* **gputide only ever lowers a limit.** No request sets a GPU above its default limit (the one it boots with),
  whatever the board's maximum; a request at or above the default (the controller's give-back writes the
  catalogue TDP) sets exactly the default.
* A new or changed entry is applied. An entry whose GPU now runs *above* the cap applied (raised by hand with
  ``nvidia-smi -pl``) is applied again; a GPU running *below* it (lowered by hand) is left alone.
* An entry that disappears (its key deleted, the whole annotation or file removed) gives that GPU its default
  limit back.
* An entry for a GPU the node does not have (replaced since, or a typo) is logged once and ignored.
* An unreadable or malformed source changes nothing; a refusal (no root or CAP_SYS_ADMIN, a lost GPU) does not
  stop the other GPUs. Either way `failed` says why (the agent's CLI counts a failed sync, which
  ``GputidePowerCapAgentFailing`` watches) and what was not applied is tried again at the next sync.

The agent remembers only what it applied since it started: a restarted agent applies every entry again (a limit
set by hand on a GPU the source names is overwritten then), and an entry deleted while no agent ran leaves its
GPU's limit where it was. NVML keeps a limit until the driver reloads or the node reboots, so removing the agent
leaves the caps it set: delete the annotation (or file) and let one sync pass first.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple, Protocol

log = logging.getLogger(__name__)
RESTORE = math.inf   # a request for "the default limit": every target clamps it down to exactly that
TOLERANCE_W = 1.0


class PowerLimit(NamedTuple):
    """A GPU's power management limit now and the default it boots with, in watts (NaN: NVML did not say)."""

    current_w: float
    default_w: float


class PowerCapError(Exception):
    """The driver refused some of the limits asked for; `applied` holds those it set, `refused` why per GPU."""

    def __init__(self, applied: Mapping[str, float], refused: Mapping[str, str]) -> None:
        super().__init__("; ".join(f"{uuid}: {why}" for uuid, why in refused.items()))
        self.applied, self.refused = dict(applied), dict(refused)


class CapSource(Protocol):
    def read(self) -> Mapping[str, float] | None: ...


class CapTarget(Protocol):
    def apply_power_caps(self, caps: Mapping[str, float]) -> Mapping[str, float]: ...


def parse_caps(doc: Any) -> dict[str, float]:
    """The caps of a decoded JSON document, {uuid: watts > 0}; ValueError says what is wrong with it. One bad
    entry spoils the whole document: reading it as "that GPU has no cap" would give a throttled GPU back."""
    if not isinstance(doc, dict):
        raise ValueError(f"expected an object of GPU UUID -> watts, not {type(doc).__name__}")
    caps = {}
    for uuid, watts in doc.items():
        if isinstance(watts, bool) or not isinstance(watts, int | float) or not 0 < watts < math.inf:
            raise ValueError(f"{uuid}: watts {watts!r} is not a positive number")
        caps[str(uuid)] = float(watts)
    return caps


class JsonFileCaps:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self) -> dict[str, float] | None:
        try:
            doc = json.loads(self.path.read_text())
            if isinstance(doc, dict) and isinstance(doc.get("caps"), dict):
                doc = doc["caps"]
            return parse_caps(doc)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error("power caps file %s unreadable, keeping current limits: %s", self.path, exc)
            return None


class PowerCapAgent:
    def __init__(self, source: CapSource, target: CapTarget) -> None:
        self.source = source
        self.target = target
        self.failed: str | None = None     # why the last sync did not do all it should have; None: it did
        self._asked: dict[str, float] = {}    # what the source asked for, per GPU, as last applied
        self._applied: dict[str, float] = {}  # what the target set for it
        self._unknown: set[str] = set()

    def sync(self) -> dict[str, float]:
        """Apply what the source asks for now; returns what the target set (UUID -> watts)."""
        wanted = self.source.read()
        if wanted is None:
            self.failed = "the requested caps are unreadable"
            return {}
        requests = self._requests(wanted, self._limits())
        self.failed = None
        if not requests:
            return {}
        try:
            applied = dict(self.target.apply_power_caps(requests))
        except PowerCapError as err:
            applied = err.applied
            self.failed = f"the driver refused: {err}"
            log.error("power caps not applied: %s", err)
        for uuid, watts in applied.items():
            if uuid in wanted:
                self._asked[uuid], self._applied[uuid] = wanted[uuid], watts
            else:   # given back
                self._asked.pop(uuid, None)
                self._applied.pop(uuid, None)
        return applied

    def _limits(self) -> Mapping[str, PowerLimit] | None:
        limits = getattr(self.target, "power_limits", None)
        return limits() if callable(limits) else None

    def _requests(self, wanted: Mapping[str, float], limits: Mapping[str, PowerLimit] | None) -> dict[str, float]:
        requests = {}
        for uuid, watts in wanted.items():
            if limits is not None and uuid not in limits:
                if uuid not in self._unknown:
                    self._unknown.add(uuid)
                    log.warning("power cap for %s ignored: no such GPU on this node (replaced?)", uuid)
                continue
            if self._asked.get(uuid) != watts or (limits is not None and self._lifted(uuid, limits[uuid])):
                requests[uuid] = watts
        requests.update((uuid, RESTORE) for uuid in self._asked.keys() - wanted.keys())
        return requests

    def _lifted(self, uuid: str, limit: PowerLimit) -> bool:
        """Whether a cap applied to `uuid` is in force no more: the GPU runs above it (nvidia-smi -pl, ...)."""
        applied = self._applied.get(uuid, math.nan)
        return applied < limit.default_w - TOLERANCE_W and limit.current_w > applied + TOLERANCE_W
