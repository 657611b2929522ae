"""Power-cap agent: apply the per-GPU power limits a controller asks for on this node, and give them back.

A *source* answers ``read() -> {uuid: entry}``, or None when it cannot tell (unreadable or malformed: then nothing
changes). An entry is a cap in watts, or a `Restore`: ``{"restore": W}``, what the controller's give-back leaves
where its cap was (the GPU had been capped at W; put its default limit back). `JsonFileCaps` reads a JSON object
``{"GPU-...": 300, "GPU-...": {"restore": 280}}`` (or ``{"caps": {...}}``) from a file (a missing file: no caps); on
Kubernetes `balancer.actuate.k8s_nodes.NodeAnnotationCaps` reads the node annotation the controller's
`SetPowerLimit` writes; a cap may come with an expiry (`Expiring`, see "Expiry" below). A *target* sets limits:
``apply_power_caps({uuid: watts})`` returns the watts it set, each clamped to [the GPU's minimum, its *default*
limit], and raises `PowerCapError` (holding what it did set) when the driver refused some. A target that also
answers ``power_limits() -> {uuid: PowerLimit}`` (the NVML backend; the simulated fleet does not) tells the agent
which GPUs the node has and where their limits are, once per sync, before anything is set; it raises
`TargetUnavailable` when it can read no limit at all (NVML not answering, and not initialised again by that call:
`exporters.backends.nvml_init`).

What `PowerCapAgent.sync()` does, each interval:

* **gputide only ever lowers a limit.** No request sets a GPU above its default limit (the one it boots with),
  whatever the board's maximum; a request at or above the default sets exactly the default. Nor above the limit
  the GPU ran at before gputide's first cap (an operator's ``nvidia-smi -pl 250``): that limit is kept
  (`exporters.power_limits_before.LimitsBefore`, a state file that outlives the agent) and a give-back puts *it*
  back, not the default. A limit changed by someone else while gputide's cap is in force (found neither the one
  before nor the one gputide set) takes its place: raised by hand, the cap is applied again and the give-back
  restores the operator's new limit; lowered, no later cap raises it. So does one changed while the driver refuses
  gputide's first cap (no CAP_SYS_ADMIN yet): until a cap is applied, the limit before is the one in force, unless the
  GPU runs at the cap asked (applied, and the agent stopped before it wrote so: written down now as gputide's cap: a
  refused Set no longer makes it a refused first cap, and its give-back puts the limit before back, not the default)
  and no agent has seen that cap refused since it was last asked (then it is an operator's at the cap's watts). The
  refusal is kept in the limits before, so an agent restarted since knows it too, and cleared there before the cap is
  asked again (a GPU whose clearing cannot be written is not asked that sync, counted failed), so a Set that lands is
  never taken for a refused one, even if the agent stops before it writes so. A cap given back or expired while still
  refused is carried out as it is: nothing of gputide's to put back (the GPU at the cap's watts is an operator's); its
  refusal stays written while the give-back does, so an agent restarted once the driver allows Sets leaves it too.
  A GPU whose limit cannot be read is not capped for the first time until it can (its limit before would be unknown;
  counted failed meanwhile), nor, once capped, given a changed cap (the Set would not be checked against the limit:
  one an operator lowered meanwhile was raised), nor its first cap's give-back judged (whether that cap landed is
  told from the limit: its limit before is kept meanwhile). With a state file, a GPU found already at the cap asked
  (below its default) with nothing remembered is not asked: no Set of gputide's put that limit there (each first cap
  is written down before it is asked, unless that write failed: see below), so it is an operator's, written down as a
  refused first cap in force is, and its give-back or deletion leaves it (was: the default restored over the
  operator's limit, or, without CAP_SYS_ADMIN, a Set the driver refused, failing every sync for good); a lower cap is
  held to it. An agent restarted under its own cap with the state file lost takes that cap for an operator's too: its
  give-back leaves it in force (was: the default restored, whoever had set that limit). So does one restarted after a
  first cap whose record could not be written (a full disk) was asked anyway (a hot GPU is capped first: thermal
  safety), before a later write of the state file succeeded: that cap is left on, a trade accepted; the agent logs a
  WARNING when it asks such a cap (once per GPU until the file is written). Without a state file (the exporter's
  ``--power-caps-file`` agent) nothing remembered tells nothing, since a restarted agent remembers nothing of its own
  caps either: such a GPU is capped as any other and its give-back restores the default (an operator's limit at the
  cap's watts too; logged at WARNING), rather than leave gputide's cap on for good.
* A new or changed cap is applied (held to the limit before). A GPU that now runs *above* the cap applied (raised by
  hand with ``nvidia-smi -pl``, or back at its default after a GPU reset or a driver reload) gets it again (listed
  in `lost` for that sync, logged); a GPU running *below* it (lowered by hand) is left alone.
* **Giving back never overrides a limit set by hand.** A `Restore` entry, or a cap that disappears (its key
  deleted, the whole annotation or file removed), puts the GPU's limit before back only while the GPU still runs
  at the cap gputide set (W, clamped as the target clamps it); a limit anybody set since is left as it is (logged).
  A `Restore` is decided from the GPU itself, not from the agent's memory, so a give-back written while no agent
  ran (restarted, crash-looping, being upgraded) is carried out when one starts; without ``power_limits()`` it is
  put back once per agent start. The controller drops a `Restore` once the GPU's limit has left that cap. A give-back
  is never judged on a limit that could not be read this sync (NaN): it waits for the next one (counted failed).
* An entry for a GPU the node does not have (replaced since, or a typo) is logged once and ignored; so is one for
  a MIG device (``MIG-...``): NVML sets a power limit on the physical GPU only, shared by all its GPU instances,
  and the controller names GPUs by their UUID as dcgm-exporter's ``UUID`` label does on MIG series too.
* An unreadable or malformed source changes nothing, nor does a target that can read no limit (`TargetUnavailable`);
  a refusal (no root or CAP_SYS_ADMIN, a lost GPU) does not stop the other GPUs. Either way `failed` says why (the
  agent's CLI counts a failed sync, which ``GputidePowerCapAgentFailing`` watches) and what was not applied is tried
  again at the next sync; a Set the driver refuses for good, less and less often ("Refused for good" below).
* **A Set that has not returned is pending, never done nor forgotten.** The NVML target calls each GPU with a
  deadline (a GPU in recovery): a Set past it may still land when NVML returns (`PowerCapError.pending`). It is
  kept, with the watts asked (in the limits before too, so a restarted agent knows it), and the GPU is left alone
  (not Set again, nothing given back, its limit not taken as changed by hand) until the target says what the Set
  returned (`returned_sets`: the watts set, done; refused, not done, whatever the limit reads) or, where it cannot
  (an agent restarted meanwhile), a sync reads its limit: at the watts asked, the Set is done (gputide's cap, not an
  operator's: the limit before stays the one remembered); else it did not take, and is asked again as a refused one
  is. A first cap (no limit gputide set yet) is written pending, at the watts asked, before it is asked (with its
  limit before when that is new, `_unrefuse` else: only first Sets cost a write more), and written set, or refused,
  once it returns: an agent stopped as it lands leaves a file that says a Set may have landed, so a restarted agent
  finding the GPU at those watts takes them for gputide's cap, not an operator's, and gives the GPU back to the limit
  before once its entry is gone (was: the limit before dropped, the GPU left capped for good, nothing failing).

Expiry. A cap the source gives as ``Expiring(W, until)`` (on Kubernetes: the node annotation
``gputide.io/power-caps-until``, which the controller renews while it still wants its caps) is the cap W until
``until`` (epoch seconds, the controller's clock) plus `EXPIRY_MARGIN_S` (this node's clock may run ahead of the
controller's); after that it is given back as a `Restore(W)` would be (so a limit set by hand since is left alone),
logged at WARNING once per GPU and expiry, and listed in `expired` for that sync. A controller that dies, is
uninstalled without cleaning up, or whose leader is stuck thus leaves no cap in force for longer than its expiry. A
cap given without an expiry (a plain number: an older controller, a hand edit, the exporter's caps file) never
expires. A renewed cap (a later ``until``) is applied again if it had expired.

Refused for good. A Set the driver refuses with NVML's NoPermission (the agent without root or CAP_SYS_ADMIN, or the
board, its hypervisor or the driver forbidding it) or NotSupported (`REFUSED_FOR_GOOD`) is asked again at the next
sync, then after twice as many syncs at each refusal (syncs 1, 2, 4, 8, ... after the first), at most
`REFUSAL_BACKOFF_MAX_S` (10 minutes) apart: asked every sync it cost an NVML call, a log line and, for a first cap,
two state-file writes (the refusal cleared before the Set, written back after it) every 10 s for good. While it
waits it is not asked, nothing of it is written or logged (logged once when it starts waiting, once when a Set
lands), and every sync fails saying so, in the same words (the GPU is still not capped). Both writes still frame each
Set asked, and a write that failed is still written at the next sync, waiting or not. A GPU asked for another kind
of thing (a cap given back, its entry deleted, capped again after either) is asked at once, and so is every GPU by a
new agent (the wait is kept in memory only): CAP_SYS_ADMIN granted restarts the agent's pod. A cap whose watts change
keeps its wait, and is asked at the watts asked then: the controller's throttle moves a hot GPU's cap every
``powerCooldownS`` (2 minutes), which would have kept the wait under that and logged the refusal at each change. A
limit changed by hand (taken as the limit before, or re-capped) is asked at once too: something outside the agent
changed. A GPU no longer asked for anything (its give-back settled another way: reset to the default, set by hand) or
no longer on the node waits no more; one whose limit is unread keeps its wait. Any other refusal (a lost GPU, a Set
past its deadline, a limit moved) is asked again at every sync, and ends a wait. No Set is asked for the limit already
in force: the NVML target counts it done without a call (its milliwatts equal), and a first cap seen refused whose GPU
an operator put at its watts is not asked (in force, and the operator's: `_held_down`), nor, with a state file, one
whose GPU is found at its watts with nothing written down (`_found_in_force`). Asked, a node already at the watts
asked failed every sync for good without CAP_SYS_ADMIN.

Besides the source and the limits before, the agent remembers only what it applied since it started: a restarted
agent applies every cap again (a limit set by hand on a GPU the source names is overwritten then). A cap whose key
was deleted outright while no agent ran (the annotation removed while the agent crash-looped, or the agent
uninstalled and installed again) is given back by the next agent from the limits before, which say what was set,
while the GPU still runs at it; without them (no state file) it stays where it was. NVML keeps a limit until the
driver reloads or the node reboots, so removing the agent leaves the caps it set: delete the annotation (or file)
and let one sync pass first.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from exporters.power_limits_before import Held, LimitsBefore

log = logging.getLogger(__name__)
RESTORE = math.inf   # a request for "the default limit": every target clamps it down to exactly that
TOLERANCE_W = 1.0
# an expiry counts as passed only this long after it, by this node's clock: the controller's may lag it (NTP keeps
# nodes within a second or so; this leaves room for a node whose time sync is broken). A live controller renews its
# caps half their TTL ahead of the expiry, so skew up to that much more never drops a cap it still renews.
EXPIRY_MARGIN_S = 60.0
# Refusals that last until something outside the agent changes, as the NVML target words them ("<pynvml's error
# class>: <message>", `exporters.backends.nvml_power`): NoPermission (the agent lacks root or CAP_SYS_ADMIN, or the
# board, its hypervisor or the driver forbids the Set) and NotSupported (NVML documents it for
# nvmlDeviceSetPowerManagementLimit as "the device does not support this feature": the board's, not the moment's;
# `RememberedNotSupported` is the same answer for its default limit or range, kept by the target). A GPU whose Set
# is refused so is asked again less and less often (`Backoff`), not every sync for good.
REFUSED_FOR_GOOD = ("NVMLError_NoPermission", "NVMLError_NotSupported", "RememberedNotSupported")
# the longest a GPU refused for good waits before it is asked again. 10 minutes: what the NVML target remembers a
# NotSupported for anyway (`nvml_power.NOT_SUPPORTED_TTL_S`, a GPU in recovery may answer it for a while), well
# inside the controller's caps' TTL (15 minutes) so a cap the driver allows at last still lands before it would
# expire, while a GPU refused for days costs a Set and two state-file writes every 10 minutes, not every sync (10 s).
# Reached by a hot GPU too: a cap's new watts (the controller's throttle, every `powerCooldownS`) keep its wait; only
# another kind of request (given back, deleted, capped again) is asked at once. CAP_SYS_ADMIN granted restarts the
# agent's pod, and a new agent asks at once.
REFUSAL_BACKOFF_MAX_S = 600.0


class PowerLimit(NamedTuple):
    """A GPU's power management limit now, the default it boots with and the least it accepts, in watts (NaN: NVML
    did not say)."""

    current_w: float
    default_w: float
    min_w: float = math.nan


class Restore(NamedTuple):
    """A given-back entry: put the GPU's default limit back if it still runs at `cap_w`, the cap gputide set."""

    cap_w: float


class Expiring(NamedTuple):
    """A cap of `cap_w` that holds until `until` (epoch seconds), unless the controller renews it (a later one)."""

    cap_w: float
    until: float


Entry = float | Restore | Expiring


class PowerCapError(Exception):
    """The driver refused some of the limits asked for; `applied` holds those it set, `refused` why per GPU, and
    `pending` those of them whose Set has not returned (it may yet land: neither done nor refused for good)."""

    def __init__(self, applied: Mapping[str, float], refused: Mapping[str, str], pending: Iterable[str] = ()) -> None:
        super().__init__("; ".join(f"{uuid}: {why}" for uuid, why in refused.items()))
        self.applied, self.refused, self.pending = dict(applied), dict(refused), frozenset(pending)


class Pending(NamedTuple):
    """A Set that has not returned: what the source asked for then (None: a cap given back by deletion; `AFTER`
    when an earlier agent made it) and the watts asked of the target."""

    want: Entry | None
    watts: float


AFTER = Restore(math.nan)   # a Pending kept by an earlier agent (the limits before say so): what it was for unknown


class Backoff(NamedTuple):
    """A GPU whose Set the driver refused for good (`REFUSED_FOR_GOOD`): the kind of thing asked (`_kind`: what ends
    the wait, not its watts), why it was refused, when it was last asked (the agent's sync count, its clock) and how
    many syncs it waits from then: 1, doubled at each refusal until the wait reaches `REFUSAL_BACKOFF_MAX_S`."""

    kind: str
    why: str
    sync: int
    at: float
    gap: int


class TargetUnavailable(Exception):
    """The target can read no power limit now (NVML does not answer): the sync changes nothing and fails."""


class CapSource(Protocol):
    def read(self) -> Mapping[str, Entry] | None: ...


class CapTarget(Protocol):
    def apply_power_caps(self, caps: Mapping[str, float]) -> Mapping[str, float]: ...


def parse_caps(doc: Any) -> dict[str, Entry]:
    """The entries of a decoded JSON document, {uuid: watts > 0 or Restore(watts > 0)}; ValueError says what is
    wrong with it. One bad entry spoils the whole document: reading it as "that GPU has no cap" would give a
    throttled GPU back."""
    if not isinstance(doc, dict):
        raise ValueError(f"expected an object of GPU UUID -> watts, not {type(doc).__name__}")
    caps: dict[str, Entry] = {}
    for uuid, value in doc.items():
        if isinstance(value, dict) and value.keys() == {"restore"}:
            caps[str(uuid)] = Restore(_watts(uuid, value["restore"]))
        else:
            caps[str(uuid)] = _watts(uuid, value)
    return caps


def expiring(caps: Mapping[str, Entry], until: float | None) -> dict[str, Entry]:
    """`caps` with every plain cap made to expire at `until` (None: no expiry, as they are)."""
    if until is None:
        return dict(caps)
    return {uuid: Expiring(want, until) if isinstance(want, float) else want for uuid, want in caps.items()}


def _kind(want: Entry | None) -> str:
    """What kind of request an entry makes, whatever its watts: a cap, a give-back (`Restore`), a deletion (None)."""
    return "deletion" if want is None else "give-back" if isinstance(want, Restore) else "cap"


def _watts(uuid: Any, watts: Any) -> float:
    if isinstance(watts, bool) or not isinstance(watts, int | float) or not 0 < watts < math.inf:
        raise ValueError(f"{uuid}: watts {watts!r} is not a positive number (nor {{\"restore\": watts}})")
    return float(watts)


def in_force(cap_w: float, limit: PowerLimit) -> float:
    """The limit a cap of `cap_w` sets on a GPU: clamped to [its minimum, its default] as every target clamps it."""
    watts = cap_w if math.isnan(limit.default_w) else min(cap_w, limit.default_w)
    return watts if math.isnan(limit.min_w) else max(watts, min(limit.min_w, limit.default_w))


def runs_at(limit: PowerLimit, cap_w: float) -> bool:
    """Whether a GPU's limit reads a cap of `cap_w` as the target set it (`in_force`, within `TOLERANCE_W`): the one
    test of "the GPU runs at the cap" wherever the agent tells its own cap from another limit, so that those tests
    cannot drift apart. An unread limit (NaN) never does."""
    return abs(limit.current_w - in_force(cap_w, limit)) <= TOLERANCE_W


def runs_held_at(limit: PowerLimit, cap_w: float, held: Held) -> bool:
    """Whether a GPU runs at a cap of `cap_w` as gputide asks it, held to the limit before its cap (never raised
    above it): the one test by which `_landed` and `_held_down` tell a first cap in force, so they cannot drift."""
    return runs_at(limit, min(cap_w, held.before_w))


def holds(limit: PowerLimit, cap_w: float) -> bool:
    """Whether a GPU still runs at the cap gputide set (`cap_w`) and under its default: gputide's to give back."""
    return runs_at(limit, cap_w) and limit.current_w < limit.default_w - TOLERANCE_W


class JsonFileCaps:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self) -> dict[str, Entry] | None:
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
    def __init__(self, source: CapSource, target: CapTarget, before: LimitsBefore | None = None, *,
                 clock: Callable[[], float] = time.time, expiry_margin_s: float = EXPIRY_MARGIN_S) -> None:
        self.source = source
        self.target = target
        self.clock, self.expiry_margin_s = clock, expiry_margin_s
        self._expired: dict[str, float] = {}   # GPU -> the expiry of its cap that passed, logged and counted
        self.expired: set[str] = set()   # this sync: GPUs whose cap's expiry has just been found passed
        self.before = LimitsBefore() if before is None else before   # per GPU under gputide's cap
        self._unsaved: str | None = None   # this sync: why the limits before could not be written
        self.failed: str | None = None     # why the last sync did not do all it should have; None: it did
        self._asked: dict[str, Entry] = {}    # what the source asked for, per GPU, as last carried out
        self._applied: dict[str, float] = {}  # what the target set for it
        self._unknown: set[str] = set()
        self._unrecorded: set[str] = set()   # this sync: first caps whose record could not be written (`_held_down`)
        self._warned_unrecorded: set[str] = set()   # ... warned of since the state file was last written whole
        self._blind: set[str] = set()   # this sync: GPUs whose limit could not be read, their give-back waiting
        self._pending: dict[str, Pending] = {   # Sets that have not returned: judged once the GPU's limit reads
            uuid: Pending(AFTER, held.pending_w) for uuid, held in self.before.items()
            if not math.isnan(held.pending_w)}
        self.lost: set[str] = set()     # this sync: GPUs found above gputide's cap (raised by hand, reset), re-capped
        self._syncs = 0   # syncs begun: what a `Backoff` waits in
        self._backoff: dict[str, Backoff] = {}   # GPUs whose Set the driver refused for good, asked again less often

    def sync(self) -> dict[str, float]:
        """Apply what the source asks for now; returns what the target set (UUID -> watts)."""
        self.expired = set()
        self._unsaved = None
        self._syncs += 1
        # what an earlier sync could not write, first, whatever else fails: a refusal `_apply` could not write left
        # the file saying "not refused" (`_unrefuse`), so an agent restarted before it is written took an operator's
        # limit at the cap's watts for gputide's cap (was: not written while the source was unreadable)
        if self._keep(self.before.flush):   # the file holds all the memory does: no first cap unrecorded
            self._warned_unrecorded.clear()
        self._unrecorded = set()
        self._blind: set[str] = set()
        self.lost = set()   # this sync's: a sync that returns early found none (the CLI counts them each sync)
        read = self.source.read()
        if read is None:
            self.failed = "; ".join(filter(None, ("the requested caps are unreadable", self._unsaved)))
            return {}
        wanted = self._unexpired(read)
        try:
            limits = self._limits()
        except TargetUnavailable as exc:   # nothing judged or set on limits not read (the next sync tries again)
            self.failed = "; ".join(filter(None, (f"no power limit read or set: {exc}", self._unsaved)))
            return {}
        settled = self._settle(limits)
        self._changed_by_hand(wanted, limits)
        requests = self._backed_off(self._held_down(self._requests(wanted, limits), limits), wanted)
        self.lost &= requests.keys()   # "applied again": not while its re-cap waits out a refusal (`_backed_off`)
        self.failed = "; ".join(self._waiting()) or None   # tried again next sync, counted failed meanwhile
        requests = self._unrefuse(requests)
        self._warn_unrecorded(requests)
        applied = self._apply(requests, wanted) if requests else {}
        for uuid, watts in applied.items():
            self._done(uuid, wanted.get(uuid), watts)
        self._unasked(requests, applied)
        self._backed_off_done(requests, applied)
        self.failed = "; ".join(filter(None, (self.failed, self._refusing(), self._unsaved))) or None
        return {**settled, **applied}

    def _waiting(self) -> list[str]:
        """Why some GPU's cap or give-back waits for a later sync (GputidePowerCapAgentFailing counts it)."""
        why = []
        if self._blind:
            why.append(f"the power limits of {', '.join(sorted(self._blind))} could not be read: their cap or "
                       "give-back waits for the next sync")
        if self._pending:
            why.append(f"the power-limit Set of {', '.join(sorted(self._pending))} has not returned: pending, judged "
                       "from what it returns once it does")
        return why

    def _backed_off(self, requests: dict[str, float], wanted: Mapping[str, Entry]) -> dict[str, float]:
        """`requests` less the GPUs waiting out a refusal for good (`Backoff`): neither asked, nor written (no
        `_unrefuse` clear, no refusal written back), nor logged this sync; still failed (`_refusing`). Asked again once
        the syncs it waits have begun, or `REFUSAL_BACKOFF_MAX_S` has passed since it was last asked, at the watts asked
        then. One asked for another kind of thing (`_kind`: a cap given back, its entry deleted, capped again after
        either) waits no more: asked at once, as in a new agent (the backoff is kept in memory only); a cap's changed
        watts keep the wait (a hot GPU's throttle moves them every ``powerCooldownS``; was: the wait never grew past
        that, and the refusal was logged at each move); a limit changed by hand ends it (`_changed_by_hand`,
        `_not_capped_yet`). One not asked this sync waits on only while its limit is unread and it is asked for the same
        kind of thing: else what it waited for was settled another way (a give-back whose GPU was reset to its default
        or set by hand; was: nothing left to ask, yet every sync failed saying the driver refuses it, for good) or the
        GPU is gone from the node."""
        for uuid, wait in list(self._backoff.items()):   # asked for another kind, or not asked, limit read
            if wait.kind != _kind(wanted.get(uuid)) or (uuid not in requests and uuid not in self._blind):
                del self._backoff[uuid]
        return {uuid: watts for uuid, watts in requests.items() if (wait := self._backoff.get(uuid)) is None
                or self._syncs - wait.sync >= wait.gap or self.clock() - wait.at >= REFUSAL_BACKOFF_MAX_S}

    def _back_off(self, uuid: str, kind: str, why: str) -> None:
        """`uuid`'s Set for a request of `kind` (`_kind`: all a wait keeps of it) refused for good: asked again after
        the next sync begins if it was not waiting (logged, once), else after twice the syncs it waited (as many once
        it has waited the longest)."""
        now, was = self.clock(), self._backoff.get(uuid)
        if was is None:
            log.error("the driver refuses the power-limit Set of %s (%s): not set; asked again at the next sync, then "
                      "after twice as many syncs at each refusal, at most %.0f s apart (logged again when it lands; "
                      "the sync fails meanwhile)", uuid, why, REFUSAL_BACKOFF_MAX_S)
            gap = 1
        else:
            gap = was.gap if now - was.at >= REFUSAL_BACKOFF_MAX_S else was.gap * 2
        self._backoff[uuid] = Backoff(kind, why, self._syncs, now, gap)

    def _backed_off_done(self, requests: Mapping[str, float], applied: Mapping[str, float]) -> None:
        """GPUs that waited out a refusal for good, asked this sync and not refused so again: they wait no more. One
        whose Set landed says so (once); one refused otherwise (a lost GPU, pending) is asked as any refused Set is."""
        for uuid in requests.keys() & self._backoff.keys():
            wait = self._backoff[uuid]
            if wait.sync == self._syncs:   # refused for good again this sync
                continue
            del self._backoff[uuid]
            if uuid in applied:
                log.info("the power-limit Set of %s landed (%.0f W), the driver refusing it no more (was: %s)",
                         uuid, applied[uuid], wait.why)

    def _refusing(self) -> str | None:
        """Why the sync fails while some GPU's Set is refused for good, waiting or asked again: the same words at
        every sync while the same GPUs are refused for the same reasons (the CLI logs a failure once per reason)."""
        if not self._backoff:
            return None
        gpus = ", ".join(f"{uuid} ({wait.why})" for uuid, wait in sorted(self._backoff.items()))
        return (f"the driver refuses the power-limit Set of {gpus}: not set, asked again less and less often, at "
                f"most every {REFUSAL_BACKOFF_MAX_S:.0f} s")

    def _unrefuse(self, requests: dict[str, float]) -> dict[str, float]:
        """`requests`, each first cap in them (no limit gputide set yet) written as pending at the watts asked, and
        refused no more, before the Set is asked (`_done` writes it set once it lands, `_apply` refused again if it
        is): an agent stopped between the Set landing and that write left a record that said no cap of gputide's,
        so a restarted agent took the Set for an operator's limit at the cap's watts (refused), or, its entry
        deleted meanwhile, dropped the limit before and left the GPU capped for good (`_left_capped` needs a limit
        set); pending, it is judged as any Set that has not returned (`_settle`: at those watts, gputide's cap).
        A first cap `_held_down` has just written is so already: no write. One write for all the others; if it
        fails, the refused ones are not asked this sync (still refused, in memory as on disk), the others are (a
        hot GPU is capped anyway, as when its limit before cannot be written)."""
        first = {uuid: held for uuid, watts in requests.items() if watts != RESTORE
                 and (held := self.before.get(uuid)) is not None and math.isnan(held.set_w)}
        if not first or self._keep(lambda: self.before.put_many(
                {uuid: held._replace(refused=False, pending_w=requests[uuid]) for uuid, held in first.items()},
                or_none=True)):
            return requests
        return {uuid: watts for uuid, watts in requests.items() if uuid not in first or not first[uuid].refused}

    def _warn_unrecorded(self, requests: Mapping[str, float]) -> None:
        """Warn of each first cap asked although its record could not be written (`_held_down`; a hot GPU is capped
        anyway), once per GPU until the state file is written: an agent restarted before then finds the GPU at the
        cap with nothing written down, takes it for an operator's (`_found_in_force`) and leaves it on."""
        for uuid in sorted(requests.keys() & self._unrecorded - self._warned_unrecorded):
            self._warned_unrecorded.add(uuid)
            log.warning("%s: its first power cap (%.0f W) is asked although the state file could not record it: an "
                        "agent restarted before that file is written takes the cap for an operator's limit and leaves "
                        "it on when it is given back", uuid, requests[uuid])

    def _unasked(self, requests: Mapping[str, float], applied: Mapping[str, float]) -> None:
        """First caps written pending (`_unrefuse`) that neither landed, nor were refused (`_apply` writes those),
        nor are pending: pending no more (a target that said nothing of them)."""
        stale = {uuid: held._replace(pending_w=math.nan) for uuid in requests.keys() - applied.keys()
                 - self._pending.keys() if (held := self.before.get(uuid)) is not None
                 and not math.isnan(held.pending_w)}
        if stale:
            self._keep(lambda: self.before.put_many(stale))

    def _done(self, uuid: str, want: Entry | None, watts: float) -> None:
        """The target set `watts` on `uuid` for `want` (None: a cap deleted): a give-back forgets the GPU, a cap is
        remembered as applied and as the limit gputide set. An earlier agent's Set (`AFTER`) was a give-back where it
        set the limit before, else a cap (kept as the limit gputide set; this agent applies its own caps anew). Only a
        GPU gputide had capped (`set_w` known) can have been given back: a first cap's pending Set (written before it
        is asked, set_w unknown) at the limit before is that cap, landed (an operator's limit at the cap's watts, the
        cap refused earlier), not a give-back, so its limit before stays to be restored (audit s34x11 of 2ee8c2f8)."""
        held = self.before.get(uuid)
        if want is AFTER and (held is None
                              or not math.isnan(held.set_w) and abs(watts - held.before_w) <= TOLERANCE_W):
            want = None
        if want is None or (isinstance(want, Restore) and want is not AFTER):   # given back
            self._forget(uuid)
            if want is not None:
                self._asked[uuid], self._applied[uuid] = want, watts
            return
        if want is not AFTER:
            self._asked[uuid], self._applied[uuid] = want, watts
        if held is not None:
            self._keep(lambda: self.before.put(uuid, held._replace(set_w=watts, pending_w=math.nan, refused=False)))

    def _settle(self, limits: Mapping[str, PowerLimit] | None) -> dict[str, float]:
        """Sets that had not returned, judged before anything else is: from what the Set returned where the target
        says (`returned_sets`: the watts set, done; refused, not done, whatever the limit reads: an operator's
        ``nvidia-smi -pl`` at the watts asked is the operator's), else from the limit each GPU reads now: at the
        watts asked, done (the limit gputide set, never an operator's; the limit before stays the one remembered),
        else not done (asked again as any refused Set is). One whose GPU's limit is unread and whose Set has not
        said stays pending, its GPU left alone (not Set again, nothing given back or taken as changed by hand). What
        was done is returned."""
        settled = {}
        returned = self._returned_sets()
        for uuid, pending in list(self._pending.items()):
            limit = None if limits is None else limits.get(uuid)
            got = returned.get(uuid)
            if got is None and limit is not None and math.isnan(limit.current_w):
                continue   # its call (or a read) still inside NVML, or unreadable: judged at a later sync
            del self._pending[uuid]
            if got is None and limit is not None and runs_at(limit, pending.watts):
                got = limit.current_w
            if isinstance(got, float | int):
                log.info("the power-limit Set of %s that had not returned is done: %.0f W", uuid, got)
                self._done(uuid, pending.want, got)
                settled[uuid] = got
            else:   # no such GPU now: nothing of it to judge, but forgotten in the state file too
                if limit is not None or got is not None:
                    log.info("the power-limit Set of %s that had not returned did not take (%s): asked again as a "
                             "refused one is", uuid, got or f"{limit.current_w:.0f} W, not "
                             f"{in_force(pending.watts, limit):.0f} W")
                if (held := self.before.get(uuid)) is not None:   # else reloaded as pending at every restart
                    # a first cap, refused: none of gputide's Sets landed (`_not_capped_yet`)
                    refused = held.refused or (got is not None and math.isnan(held.set_w))
                    self._keep(lambda u=uuid, h=held, r=refused: self.before.put(u, h._replace(pending_w=math.nan,
                                                                                               refused=r)))
        return settled

    def _returned_sets(self) -> Mapping[str, float | str]:
        """What the target's pending Sets returned since (a target that cannot say: nothing)."""
        returned = getattr(self.target, "returned_sets", None)
        return returned() if callable(returned) else {}

    def _unexpired(self, read: Mapping[str, Entry]) -> dict[str, float | Restore]:
        """`read` with each `Expiring` cap made a plain cap, or a give-back (`Restore`) once its expiry has passed
        (logged and listed in `expired` once per GPU and expiry)."""
        now, out = self.clock(), {}
        for uuid, want in read.items():
            if not isinstance(want, Expiring):
                out[uuid] = want
            elif now <= want.until + self.expiry_margin_s:
                out[uuid] = want.cap_w
            else:
                out[uuid] = Restore(want.cap_w)
                if self._expired.get(uuid) != want.until:
                    self._expired[uuid] = want.until
                    self.expired.add(uuid)
                    where = getattr(self.source, "node", None)
                    log.warning("power cap of %s%s (%.0f W) expired at %s (%.0f s ago) and was not renewed (the "
                                "controller stopped, uninstalled without cleanup, or without a working leader): "
                                "given back", uuid, f" on node {where}" if where else "", want.cap_w,
                                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(want.until)), now - want.until)
        for uuid in self._expired.keys() - {u for u, w in read.items() if isinstance(w, Expiring)}:
            del self._expired[uuid]   # no expiry any more, or no cap: an expiry seen later is news again
        return out

    def _apply(self, requests: Mapping[str, float], wanted: Mapping[str, Entry]) -> dict[str, float]:
        try:
            return dict(self.target.apply_power_caps(requests))
        except PowerCapError as err:
            for_good = {uuid for uuid, why in err.refused.items() if uuid in requests and uuid not in err.pending
                        and why.startswith(REFUSED_FOR_GOOD)}
            for uuid in for_good:   # logged once, not here; failed at each sync (`_refusing`)
                self._back_off(uuid, _kind(wanted.get(uuid)), err.refused[uuid])
            if others := "; ".join(f"{uuid}: {why}" for uuid, why in err.refused.items() if uuid not in for_good):
                self.failed = "; ".join(filter(None, (self.failed, f"the driver refused: {others}")))
                log.error("power caps not applied: %s", others)
            kept = {}   # written in one write, however many GPUs
            for uuid in err.refused.keys() - err.pending:   # a first cap, refused: none of its Sets landed
                if (held := self.before.get(uuid)) is not None and math.isnan(held.set_w):
                    kept[uuid] = held._replace(refused=True, pending_w=math.nan)   # written pending before
            for uuid in err.pending & requests.keys():   # may yet land: neither done nor forgotten, across restarts
                self._pending[uuid] = Pending(wanted.get(uuid), requests[uuid])
                if (held := self.before.get(uuid)) is not None:
                    kept[uuid] = held._replace(pending_w=requests[uuid])
            self._keep(lambda: self.before.put_many(kept))
            return err.applied

    def _changed_by_hand(self, wanted: Mapping[str, Entry], limits: Mapping[str, PowerLimit] | None) -> None:
        """A GPU under gputide's cap found at a limit gputide did not set (an operator's ``nvidia-smi -pl``, a
        driver reload): that limit replaces the one before, so no later cap or give-back raises the GPU above it."""
        for uuid, held in self.before.items():
            if uuid in self._pending:   # its Set may yet land: left as it is until judged (`_settle`)
                continue
            limit = None if limits is None else limits.get(uuid)
            want = wanted.get(uuid, Restore(0.0))
            capped = not isinstance(want, Restore)
            if math.isnan(held.set_w):   # a first cap not applied yet (refused)
                self._not_capped_yet(uuid, held, wanted.get(uuid), limit)
                continue
            if limit is None or not capped \
                    or not abs(limit.current_w - held.set_w) > TOLERANCE_W:   # NaN: unread, nothing to say
                continue
            if limit.current_w > held.set_w:   # gputide's cap lost: applied again (`_lifted`)
                self.lost.add(uuid)
                log.warning("power limit of %s found at %.0f W, above the %.0f W cap gputide set (nvidia-smi -pl, "
                            "a GPU reset or a driver reload): the cap is applied again, and its give-back restores "
                            "%.0f W",
                            uuid, limit.current_w, held.set_w, limit.current_w)
            else:
                log.info("power limit of %s lowered to %.0f W while capped at %.0f W by gputide (before: %.0f W): "
                         "never raised above it", uuid, limit.current_w, held.set_w, held.before_w)
            self._backoff.pop(uuid, None)   # the limit changed from outside: a refused Set is asked at once
            self._keep(lambda u=uuid, w=limit.current_w: self.before.put(u, Held(w, w)))

    def _not_capped_yet(self, uuid: str, held: Held, want: Entry | None, limit: PowerLimit | None) -> None:
        """A GPU whose first cap was refused so far. Asked no more (its cap given back, expired, or its entry
        removed): a give-back of a cap seen refused is carried out as it is, nothing of gputide's to put back (none
        of its Sets landed, so the GPU at the cap's watts is an operator's, which `_request` would have given back to
        the default), its refusal kept while the give-back lasts, for an agent restarted meanwhile; a give-back whose
        GPU's limit is unread waits; one whose cap landed unwritten (`_landed`) is given back to the limit before;
        any other record is dropped. Still asked, the limit before is the one in force now (the operator may have
        changed it while the driver refused), unless the GPU runs at the cap (`_landed`: gputide's own) and no agent
        has seen its first cap refused (`Held.refused`, kept across restarts: then none of its Sets landed, and an
        operator's ``-pl`` at the cap's watts was taken for gputide's, its give-back raising the GPU to the limit
        before)."""
        if want is None or isinstance(want, Restore):
            if want is not None and held.refused:
                # carried out: nothing of gputide's to put back. The refusal stays written while the give-back
                # does (the controller keeps it while the GPU runs at its watts): dropped, an agent restarted once
                # the driver allowed Sets took the operator's limit at the cap's watts for gputide's cap, and gave
                # it back to the default
                self._asked[uuid] = want
                return
            if want is not None and limit is not None and math.isnan(limit.current_w):
                return   # unread: whether the cap landed is judged once it reads (dropped, it was given back to
                #          the default, not the limit before)
            if want is not None and self._landed(uuid, held, want.cap_w, limit):
                return   # given back by `_request` to the limit before (was: to the default, the limit dropped)
            self._keep(lambda: self.before.drop(uuid))
            return
        if limit is None or math.isnan(limit.current_w) or abs(limit.current_w - held.before_w) <= TOLERANCE_W \
                or self._landed(uuid, held, float(want), limit):
            return
        log.info("power limit of %s changed to %.0f W (was %.0f W) before gputide's first cap went through: the "
                 "limit before is %.0f W", uuid, limit.current_w, held.before_w, limit.current_w)
        self._backoff.pop(uuid, None)   # the limit changed from outside: the refused cap is asked at once
        self._keep(lambda: self.before.put(uuid, Held(limit.current_w, refused=held.refused)))

    def _landed(self, uuid: str, held: Held, cap_w: float, limit: PowerLimit | None) -> bool:
        """Whether a GPU never seen refused runs at its first cap (`cap_w`), not at the limit before: the Set landed
        and the agent stopped before it wrote so. Written down now as the limit gputide set, so that the cap asked
        again and refused (an agent restarted without CAP_SYS_ADMIN) is no refused first cap, its limit then taken
        for an operator's, and its give-back (a `Restore` or an expiry written while no agent ran) puts the limit
        before back, not the default."""
        if held.refused or limit is None or math.isnan(limit.current_w) \
                or abs(limit.current_w - held.before_w) <= TOLERANCE_W \
                or not runs_held_at(limit, cap_w, held):
            return False
        self._keep(lambda: self.before.put(uuid, held._replace(set_w=limit.current_w)))
        return True

    def _held_down(self, requests: dict[str, float], limits: Mapping[str, PowerLimit] | None) -> dict[str, float]:
        """`requests` held to each GPU's limit before gputide's cap, a give-back (RESTORE) set to it; that limit
        is kept (written) before a GPU is first capped. A first cap seen refused whose GPU runs at the watts it
        would set (an operator's ``nvidia-smi -pl`` while the driver refused it) is not asked: in force already, and
        the operator's, not gputide's (`_not_capped_yet`). Asked, the NVML target counts a Set at the limit in force
        done without a call, and the operator's limit became gputide's cap: given back, the GPU was forgotten, and an
        agent restarted under the give-back the controller keeps raised it to the default. So is a first cap whose
        GPU already runs at it with nothing written down, with a state file (`_found_in_force`); without one it is
        asked (counted done without a call), logged: its give-back restores the default. A first cap whose record
        could not be written is asked anyway (a hot GPU is capped first), warned (`_warn_unrecorded`)."""
        held_down = {}
        for uuid, watts in requests.items():
            held = self.before.get(uuid)
            limit = None if limits is None else limits.get(uuid)
            if held is not None and held.refused and limit is not None and runs_held_at(limit, watts, held):
                continue   # not failed either: what it asks for is in force
            if held is None and watts != RESTORE and limit is not None:
                if self._unread(uuid, limit) or self._found_in_force(uuid, watts, limit):
                    continue   # its limit before unknown: capped once it reads; or in force, not gputide's
                if not runs_at(limit, watts) or uuid in self._asked:   # else at the cap asked already (below)
                    # the watts asked written as pending with it (`_unrefuse`), in the same write
                    held = Held(limit.current_w, pending_w=min(watts, limit.current_w))
                    if not self._keep(lambda u=uuid, h=held: self.before.put(u, h)):
                        self._unrecorded.add(uuid)   # asked anyway (a hot GPU): warned (`_warn_unrecorded`)
                elif holds(limit, watts):   # under its default: no state file (with one, `_found_in_force`)
                    log.warning("%s already runs at the %.0f W cap asked and no limit before it is known (no state "
                                "file: the agent's own cap before it restarted, or an operator's): its give-back "
                                "restores the default", uuid, watts)
                # else at its default (a cap at or above it): nothing to hold
            held_down[uuid] = watts if held is None else min(watts, held.before_w)
        return held_down

    def _found_in_force(self, uuid: str, watts: float, limit: PowerLimit) -> bool:
        """Whether a GPU gputide never capped (nothing written down) already runs at the first cap asked: not asked,
        and written down as a first cap in force seen refused is (`Held.refused`, its limit before the one in force),
        since no Set of gputide's put that limit there (every first cap is written down before it is asked, or
        warned of where that write failed: a hot GPU is capped anyway, and an agent restarted before the state file is
        written takes that cap for an operator's here and leaves it on, a trade accepted, `_warn_unrecorded`). Its
        give-back or deletion is carried out with nothing to put back (`_not_capped_yet`), by this agent and by one
        restarted; a lower cap is asked as a refused first cap is, held to that limit. Was: applied without a Set
        (the NVML target counts the limit in force done), and its give-back restored the default, overriding the
        operator's limit, or, without CAP_SYS_ADMIN, had the Set refused and failed every sync for good. A GPU this
        agent has carried a request out for (a give-back) is capped as any other; one at its default limit (a cap at
        or above it) has no cap in force to take for anybody's. Without a state file (`LimitsBefore.path` None: the
        exporter's ``--power-caps-file`` agent, ``power-cap-agent`` without ``--state-file``) none is: nothing written
        down tells nothing there, since an agent restarted under its own cap finds it so too, and taking that cap for
        the operator's left it on for good (its give-back or deletion left it in force); capped as any other, its
        give-back restores the default, as before."""
        if uuid in self._asked or self.before.path is None or not holds(limit, watts):
            return False
        log.warning("%s already runs at the %.0f W cap asked, which gputide did not set (none written down): taken "
                    "for the operator's limit, not asked, and left in force when the cap is given back", uuid, watts)
        self._keep(lambda: self.before.put(uuid, Held(limit.current_w, refused=True)))
        return True

    def _keep(self, write) -> bool:
        """Whether `write` wrote (else the sync fails, saying why)."""
        try:
            write()
        except OSError as exc:
            self._unsaved = f"the power limits before gputide's caps could not be written: {exc}"
            log.error("%s", self._unsaved)
            return False
        return True

    def _limits(self) -> Mapping[str, PowerLimit] | None:
        limits = getattr(self.target, "power_limits", None)
        return limits() if callable(limits) else None

    def _requests(self, wanted: Mapping[str, Entry], limits: Mapping[str, PowerLimit] | None) -> dict[str, float]:
        requests = {}
        for uuid, want in wanted.items():
            if uuid in self._pending:   # not Set again, nor judged, until its Set is (`_settle`)
                continue
            if limits is not None and uuid not in limits:
                if uuid not in self._unknown:
                    self._unknown.add(uuid)
                    log.warning("power cap for %s ignored: %s", uuid, "a MIG device: a power limit is its whole "
                                "GPU's, named by the GPU's UUID (GPU-...)" if uuid.startswith("MIG-") else
                                "no such GPU on this node (replaced?)")
                continue
            watts = self._request(uuid, want, None if limits is None else limits[uuid])
            if watts is not None:
                requests[uuid] = watts
        for uuid in self._asked.keys() - wanted.keys() - self._pending.keys():   # deleted outright: given back
            asked = self._asked[uuid]
            if isinstance(asked, Restore) or (limits is not None and uuid not in limits):
                self._forget(uuid)
            elif self._unread(uuid, None if limits is None else limits[uuid]):
                continue
            elif self._gives_back(uuid, self._applied[uuid], None if limits is None else limits[uuid]):
                requests[uuid] = RESTORE
        if limits is not None:
            requests.update(self._left_capped(wanted, limits))
        return requests

    def _left_capped(self, wanted: Mapping[str, Entry], limits: Mapping[str, PowerLimit]) -> dict[str, float]:
        """GPUs an earlier agent capped (the limits before say what it set) whose entry is gone from the source
        (deleted while no agent ran, the agent uninstalled and installed again): given back while they still run at
        that cap, as if the entry had been deleted under this agent."""
        requests = {}
        for uuid, held in self.before.items():
            if uuid in wanted or uuid in self._asked or uuid in self._pending or uuid not in limits \
                    or math.isnan(held.set_w) or self._unread(uuid, limits[uuid]):
                continue
            if self._gives_back(uuid, held.set_w, limits[uuid]):
                log.info("%s still runs at the %.0f W cap an earlier agent set, no longer asked for: given back "
                         "(%.0f W)", uuid, held.set_w, held.before_w)
                requests[uuid] = RESTORE
        return requests

    def _request(self, uuid: str, want: Entry, limit: PowerLimit | None) -> float | None:
        """What to ask the target for `uuid` now (None: nothing). A GPU under gputide's cap whose limit is unread
        waits for a later sync, as a first cap does (`_held_down`): its Set is a compare-and-set on the limit read
        (`exporters.backends.nvml_power`), so one on no limit was blind, and a cap changed then overwrote an
        operator's lower limit (150 W under a 200 W cap became 300 W, then given back to the default)."""
        if isinstance(want, Restore):
            if self._asked.get(uuid) == want or self._unread(uuid, limit):
                return None   # carried out, or left alone, already; or not to be judged on a failed read
            if self._gives_back(uuid, want.cap_w, limit):
                return RESTORE
            self._asked[uuid] = want   # settled: nothing to put back
            self._applied.pop(uuid, None)
            self._keep(lambda: self.before.drop(uuid))
            return None
        if self.before.get(uuid) is not None and self._unread(uuid, limit):
            return None   # under gputide's cap, its limit unread: a Set now would be blind (below)
        if self._asked.get(uuid) != want or (limit is not None and self._lifted(uuid, limit)):
            return want
        return None

    def _gives_back(self, uuid: str, cap_w: float, limit: PowerLimit | None) -> bool:
        """Whether to put `uuid`'s default limit back: it still runs at the cap gputide set. Without the GPU's
        limits (a target that cannot say) it is put back."""
        held = self.before.get(uuid)
        if limit is None or holds(limit, cap_w if held is None else min(cap_w, held.before_w)):
            return True
        if limit.current_w < limit.default_w - TOLERANCE_W:   # at its default already: nothing to say
                log.info("power cap of %s given back, but the GPU runs at %.0f W (default %.0f W), not the %.0f W "
                     "gputide set: left as it is", uuid, limit.current_w, limit.default_w, cap_w)
        self._forget(uuid)
        return False

    def _unread(self, uuid: str, limit: PowerLimit | None) -> bool:
        """Whether the GPU's current limit could not be read this sync (NaN): a give-back is not judged on it (it
        would read as "not gputide's cap any more" and be dropped, leaving the cap on for good) but waits."""
        if limit is not None and math.isnan(limit.current_w):
            self._blind.add(uuid)
            return True
        return False

    def _forget(self, uuid: str) -> None:
        self._asked.pop(uuid, None)
        self._applied.pop(uuid, None)
        self._keep(lambda: self.before.drop(uuid))

    def _lifted(self, uuid: str, limit: PowerLimit) -> bool:
        """Whether a cap applied to `uuid` is in force no more: the GPU runs above it (nvidia-smi -pl, ...)."""
        applied = self._applied.get(uuid, math.nan)
        if applied < limit.default_w - TOLERANCE_W and limit.current_w > applied + TOLERANCE_W:
            self.lost.add(uuid)
            return True
        return False
