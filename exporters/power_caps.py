"""Power-cap agent: read desired per-GPU power limits from a pluggable source and apply them to a backend.

A source is anything with ``read() -> Mapping[uuid, watts]``; `JsonFileCaps` reads a JSON object
``{"GPU-...": 300, ...}`` (or ``{"caps": {...}}``) from a file the controller writes (a missing file means no
caps). The Kubernetes node-annotation source lives in balancer/actuate/kubernetes.py. `PowerCapAgent.sync()`
applies the caps that changed since the last sync and returns what the backend applied, each clamped to [the GPU's
minimum, its *default* limit]: gputide only ever lowers a limit, and a request at or above the default (the
controller's give-back writes the catalogue TDP) sets exactly the default. The exporter's next scrape reports it
in ``DCGM_FI_DEV_POWER_MGMT_LIMIT``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)
RESTORE = math.inf   # a request for "the default limit": every target clamps it down to exactly that


class CapSource(Protocol):
    def read(self) -> Mapping[str, float]: ...


class CapTarget(Protocol):
    def apply_power_caps(self, caps: Mapping[str, float]) -> Mapping[str, float]: ...


class JsonFileCaps:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self) -> dict[str, float]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error("power caps file %s unreadable, keeping current limits: %s", self.path, exc)
            return {}
        if isinstance(doc, dict) and isinstance(doc.get("caps"), dict):
            doc = doc["caps"]
        if not isinstance(doc, dict):
            log.error("power caps file %s: expected an object of GPU UUID -> watts", self.path)
            return {}
        caps = {}
        for uuid, watts in doc.items():
            if isinstance(watts, int | float) and not isinstance(watts, bool) and watts > 0:
                caps[str(uuid)] = float(watts)
            else:
                log.error("power caps file %s: %s has invalid watts %r", self.path, uuid, watts)
        return caps


class PowerCapAgent:
    def __init__(self, source: CapSource, target: CapTarget) -> None:
        self.source = source
        self.target = target
        self._last: dict[str, float] = {}

    def sync(self) -> dict[str, float]:
        wanted = dict(self.source.read())
        changed = {u: w for u, w in wanted.items() if self._last.get(u) != w}
        if not changed:
            return {}
        applied = dict(self.target.apply_power_caps(changed))
        self._last.update({u: wanted[u] for u in applied})
        return applied
