"""Power-cap agent: apply the per-GPU power limits a controller asks for on this node, and give them back.

A *source* answers ``read() -> {uuid: watts}``, or None when it cannot tell (unreadable or malformed: then nothing
changes). `JsonFileCaps` reads a JSON object ``{"GPU-...": 300, ...}`` (or ``{"caps": {...}}``) from a file (a
missing file: no caps); on Kubernetes `balancer.actuate.k8s_nodes.NodeAnnotationCaps` reads the node annotation
the controller's `SetPowerLimit` writes. A *target* sets limits: ``apply_power_caps({uuid: watts})`` returns the
watts it set, each clamped to [the GPU's minimum, its *default* limit], and raises `PowerCapError` (holding what
it did set) when the driver refused some.

What `PowerCapAgent.sync()` does, each interval:

* **gputide only ever lowers a limit.** No request sets a GPU above its default limit (the one it boots with),
  whatever the board's maximum; a request at or above the default (the controller's give-back writes the
  catalogue TDP) sets exactly the default.
* A new or changed entry is applied.
* An entry that disappears (its key deleted, the whole annotation or file removed) gives that GPU its default
  limit back.
* An unreadable or malformed source changes nothing; a refusal (no root or CAP_SYS_ADMIN, a lost GPU) does not
  stop the other GPUs. Either way `failed` says why (the agent's CLI counts a failed sync, which
  ``GputidePowerCapAgentFailing`` watches) and what was not applied is tried again at the next sync.

The agent remembers only what it applied since it started: a restarted agent applies every entry again, and an
entry deleted while no agent ran leaves its GPU's limit where it was. NVML keeps a limit until the driver reloads
or the node reboots, so removing the agent leaves the caps it set: delete the annotation (or file) and let one sync
pass first. The exporter's next scrape reports a new limit in ``DCGM_FI_DEV_POWER_MGMT_LIMIT``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)
RESTORE = math.inf   # a request for "the default limit": every target clamps it down to exactly that


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

    def sync(self) -> dict[str, float]:
        """Apply what the source asks for now; returns what the target set (UUID -> watts)."""
        wanted = self.source.read()
        if wanted is None:
            self.failed = "the requested caps are unreadable"
            return {}
        self.failed = None
        requests = {uuid: watts for uuid, watts in wanted.items() if self._asked.get(uuid) != watts}
        requests.update((uuid, RESTORE) for uuid in self._asked.keys() - wanted.keys())
        if not requests:
            return {}
        try:
            applied = dict(self.target.apply_power_caps(requests))
        except PowerCapError as err:
            applied = err.applied
            self.failed = f"the driver refused: {err}"
            log.error("power caps not applied: %s", err)
        for uuid in applied:
            if uuid in wanted:
                self._asked[uuid] = wanted[uuid]
            else:   # given back
                del self._asked[uuid]
        return applied
