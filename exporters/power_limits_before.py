"""What each GPU's power limit was before gputide capped it, kept across agent restarts: `LimitsBefore(path)`.

The power-cap agent (`exporters.power_caps.PowerCapAgent`) never sets a GPU above the limit it found in force before its
first cap (``nvidia-smi -pl 250`` on a 700 W board stays 250 W once gputide gives the GPU back), nor above one an
operator set while gputide's cap was in force. The agent keeps, per GPU under its cap, a `Held`: that limit
(``before_w``) and the one it set itself (``set_w``, NaN until it did), the latter so that a limit found elsewhere later
(an operator, a driver reload) is told from its own; a Set that has not returned (``pending_w``: the watts asked, NaN
when none), which may yet land, so that an agent restarted meanwhile judges it as the one that made it would
(`exporters.power_caps`), rather than take its own cap for an operator's (a first cap's, ``set_w`` NaN, is written
before it is asked, in the write that keeps ``before_w`` where it can: an agent stopped as it lands leaves a record that
says so); and whether gputide's first cap was seen refused (``refused``: none of its Sets landed) or found in force
already with nothing recorded (the same mark: no Set of ours made it), so that an agent restarted meanwhile takes an
operator's limit at the cap's watts for the operator's, as the one that saw it does, rather than for its own cap.

It lives in a small JSON file on the node (``{"GPU-...": {"before_w": 250.0, "set_w": 200.0}}``, ``pending_w`` only
while a Set is pending or a first cap being asked, ``"refused": true`` only while a first cap is refused: a file without
them, an older agent's, loads as none pending or refused; written whole to a temporary file and renamed over, so a crash
leaves the old file or the new one), because the agent restarts (upgrades, crash loops, the liveness probe) while NVML
keeps the limits it set: a restarted agent that read the GPU's limit afresh would read its own cap as the operator's and
never give the GPU back. A node-local file needs no more than the agent has (a node annotation would need `patch` on
every node for a privileged pod on each of them); it outlives a reboot, which resets the limits, and the agent then
finds the limit no longer the one it set and takes the one in force as the operator's (`PowerCapAgent`). Without a path
it is kept in memory only (the agent's start-up then knows nothing, as before). An unreadable file is logged and read as
empty; a write that fails raises `OSError` with the entry kept in memory (the agent says so and carries on: a hot GPU is
capped anyway, a trade accepted: an agent restarted after a first cap whose record could not be written, before a later
write succeeds, finds the GPU at that cap with nothing recorded, takes it for an operator's and leaves it on; the agent
logs a WARNING when it asks such a cap); `flush()`, which the agent calls each sync, writes them all again until a write
succeeds (`put` writes nothing for an entry the memory already holds, so an entry whose write failed was otherwise never
written: a restarted agent read the file's older one).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

log = logging.getLogger(__name__)


class Held(NamedTuple):
    """A GPU under gputide's cap: the limit in force before it (never raised above), the one gputide set, the one a
    Set that has not returned asked for, and whether its first cap (`set_w` NaN) was seen refused or found in force
    already (either way no Set of gputide's made it: the give-back asks none)."""

    before_w: float
    set_w: float = math.nan
    pending_w: float = math.nan
    refused: bool = False


class LimitsBefore:
    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self._held: dict[str, Held] = self._load()
        self._unwritten = False   # the last write failed: the file is not what the memory holds

    def get(self, uuid: str) -> Held | None:
        return self._held.get(uuid)

    def items(self) -> Iterator[tuple[str, Held]]:
        return iter(list(self._held.items()))

    def put(self, uuid: str, held: Held) -> None:
        self.put_many({uuid: held})

    def put_many(self, entries: Mapping[str, Held], *, or_none: bool = False) -> None:
        """Keep all `entries`, written in one write (none if the memory holds them already): the agent keeps a
        refused first cap's record per GPU each sync, two writes a GPU were a dozen a minute for each. A write that
        fails raises `OSError` with them kept in memory, or, `or_none`, with none of them (the memory as it was, as
        the file is, for an entry the caller must not act on unless it is written)."""
        changed = {uuid: held for uuid, held in entries.items() if self._held.get(uuid) != held}
        if not changed:
            return
        was = {uuid: self._held.get(uuid) for uuid in changed}
        self._held.update(changed)
        try:
            self._save()
        except OSError:
            if or_none:
                for uuid, held in was.items():
                    if held is None:
                        del self._held[uuid]
                    else:
                        self._held[uuid] = held
            raise

    def drop(self, uuid: str) -> None:
        if self._held.pop(uuid, None) is not None:
            self._save()

    def flush(self) -> None:
        """Write the limits again if the last write failed (`OSError` if it fails again)."""
        if self._unwritten:
            self._save()

    def _load(self) -> dict[str, Held]:
        if self.path is None:
            return {}
        try:
            doc = json.loads(self.path.read_text())
            return {str(uuid): Held(float(v["before_w"]), float(v.get("set_w", math.nan)),
                                    float(v.get("pending_w", math.nan)), v.get("refused") is True)
                    for uuid, v in doc.items() if float(v["before_w"]) > 0}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            log.error("power limits before gputide's caps unreadable (%s): %s; a give-back restores the default "
                      "limit", self.path, exc)
            return {}

    def _save(self) -> None:
        if self.path is None:
            return
        self._unwritten = True
        doc = {uuid: {"before_w": h.before_w, **{k: w for k, w in (("set_w", h.set_w), ("pending_w", h.pending_w))
                                                 if not math.isnan(w)}, **({"refused": True} if h.refused else {})}
               for uuid, h in self._held.items()}
        tmp = self.path.with_name(self.path.name + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(doc, sort_keys=True))
        os.replace(tmp, self.path)
        self._unwritten = False
