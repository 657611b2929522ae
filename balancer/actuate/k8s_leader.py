"""Lease leader election for the controller and the scheduler, through the gateway's `_Api`.

`LeaseLeaderElector` follows client-go's leaderelection: a coordination.k8s.io/v1 Lease holds holderIdentity,
leaseDurationSeconds, acquireTime, renewTime and leaseTransitions; a contender takes over only when the record it
observed (holder, renewTime, transitions and leaseDurationSeconds: an edit of the duration alone counts as a change)
has not changed for a lease duration (measured on its own monotonic clock from when it saw the change, not
from the holder's renewTime, so clock skew between replicas does not matter), and writes with the observed
resourceVersion so that of two racing contenders only one wins. After a 409 client-go's elector simply fails that try
and tries again a retry period later, from a fresh read; ours reads the Lease again at once and, its holder record
unchanged (the Lease's metadata alone edited: a label, an annotation), writes again within the same try, a few times
at most (`_take`): a `--once` run's wait ends at its first failed try, so a 409 from such an edit left it a standby
behind a crashed holder's Lease, and a holder's renewal so answered ended its lead at once, the next renewal a new
term (the loop took office again). The record changed, the loser stays a standby. Every write sends back the
metadata it read (labels, annotations we do not own), as client-go's Update of the object it read does: a replace
drops what it does not carry.

A holder counts as the leader (`is_leader`) only until `renew_deadline_s` after its last successful write, a
margin of lease duration - renew deadline before any contender may take over. Every such interval is measured on a
monotonic clock: the wall clock only dates the Lease's renewTime and acquireTime. A wall clock stepped back (NTP)
must not stretch a holder's term past the moment a contender, on its own clock, takes over (two leaders).

`start()` renews from a daemon thread every `retry_period_s`, as client-go's elector does, so the Lease stays fresh
however long a reconcile cycle runs, and the loop's check before each action (`try_acquire`) is a look at that
flag, not an API call; renewals that keep failing until the deadline make `is_leader` False at once, with no call
from the loop.
Without `start()`, `try_acquire` renews on demand (the loop asks before every action).
A `--once` run found standby behind another identity's Lease keeps trying for up to a lease duration, at most the
longer of its own and a third of the Lease's (`await_lease`), the takeover rule above deciding: one try never takes a
crashed holder's Lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from balancer.actuate.kubernetes import ConflictError, Json, NotFoundError, _Api, micro_time, parse_time
from balancer.actuate.leader import LedgerNotSaved
from balancer.errors import ActuationError, TemporaryActuationError
from balancer.ledger_fit import fit

log = logging.getLogger(__name__)


# ---- leader election -----------------------------------------------------------------------------------------


LEDGER_ANNOTATION = "gputide.io/safety-ledger"  # the holder's SafetyLedger (JSON), inherited by the next holder
MAX_LEDGER_BYTES = 128 * 1024  # well inside the API server's 256 KiB limit on all annotations of an object
_WALL = time.time   # the real wall clock (as imported: a test that patches time.time later changes nothing here)
# more writes (a takeover's, a renewal's, a release's) one try makes after a 409 for a metadata-only edit (`_take`)
TAKEOVER_CONFLICT_RETRIES = 3
# of those, what a save of the Lease we hold still makes once SIGTERM came, and the release too (`_stopped_short`:
# since 0808eda1 `_release` writes again through `_take`): one, so the exit's ledger save and release keep within
# SIGTERM's budget to exit (balancer/app/health.py: each a read and a write, one more of each)
STOPPED_SAVE_RETRIES = 1


def _never() -> bool:
    return False


def _record(spec: dict) -> tuple:
    """What of a Lease's spec is watched for change (`_observed`): holder, renewTime, transitions and
    leaseDurationSeconds (client-go's record adds acquireTime, which no write changes alone), so an edit of
    leaseDurationSeconds alone restarts the count too."""
    return (spec.get("holderIdentity") or "", spec.get("renewTime"), spec.get("leaseTransitions"),
            spec.get("leaseDurationSeconds"))


def _holder_record(spec: dict) -> tuple:
    """A Lease's whole holder record, `_record`'s with acquireTime (client-go's LeaderElectionRecord): what a 409 on
    a takeover's or a renewal's write must have left as we judged it for the write to be tried again (`_take`)."""
    return _record(spec) + (spec.get("acquireTime"),)


class LeaseLeaderElector:
    """client-go style leader election on a coordination.k8s.io/v1 Lease: call `try_acquire_or_renew()` often
    enough (within the renew deadline), or `start()` a renewer thread that does.

    It is also the loop's `LeaderElector` (`try_acquire(now)` / `release()`). The lease is timed on the elector's
    own clocks, not the loop's `now`: lease expiry is a matter between replicas, and a simulated or skewed loop
    clock must not shorten or stretch it. `clock` (wall time, default `time.time`) only dates what is written into
    the Lease (renewTime, acquireTime); `monotonic` (default `time.monotonic`) times every interval: the renew
    deadline since our last write, the lease duration since we saw the record change. A test or simulation that
    sets `clock` alone (to anything but `time.time`) times both on it.

    The Lease also carries the holder's safety ledger (cooldowns, evictions and migrations in their windows) in
    the `gputide.io/safety-ledger` annotation: `save_state` writes it whenever the loop acted, `load_state` hands
    a new holder what the previous one left, so a fail-over or restart never resets the safety budgets.
    `save_state` returns only once the Lease holds the ledger (a renewal that wrote it counts) and raises
    `LedgerNotSaved` otherwise. Taking the Lease over, the elector keeps the ledger found on it (it drops its own,
    perhaps from an earlier term, until the loop saves its own merged with the one found): a takeover never
    overwrites what the previous holder spent.
    """

    def __init__(self, api_client: Any, name: str, namespace: str, identity: str,
                 lease_duration_s: int = 15, renew_deadline_s: float = 10, clock: Callable[[], float] | None = None,
                 *, max_retries: int = 0, sleep: Callable[[float], None] = time.sleep,
                 retry_period_s: float | None = None, monotonic: Callable[[], float] | None = None,
                 pause: Callable[[float], object] | None = None) -> None:
        if renew_deadline_s >= lease_duration_s:
            raise ValueError("renew_deadline_s must be shorter than lease_duration_s")
        # four tries before the renew deadline (client-go: 2 s of a 10 s deadline); a try is 2 calls of <= 5 s
        self.retry_period_s = renew_deadline_s / 4 if retry_period_s is None else retry_period_s
        if not 0 < self.retry_period_s < renew_deadline_s:
            raise ValueError("retry_period_s must be positive and shorter than renew_deadline_s")
        self._lock = threading.RLock()    # the renewer thread and the loop's save_state / release
        self._halt = threading.Event()    # set by release(): the renewer thread stops
        self._background = False          # start() called: a renewer thread keeps the Lease
        self._was_leader = False          # the renewer's last view, to log each change once
        self.api = _Api(api_client, max_retries, 0.1, sleep, 5.0)
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration_s, self.renew_deadline_s = int(lease_duration_s), renew_deadline_s
        self.clock = clock or _WALL   # wall time: only the times written into the Lease
        self.monotonic = monotonic        # every local interval (`_tick`)
        # `await_lease`'s sleep between tries, a test's or simulation's on its clock: it wins over the caller's (a
        # real wait); None: the caller's, else until `release()` (at most that long)
        self.pause: Callable[[float], object] | None = pause
        # SIGTERM's flag (`stop_when`): every try's writes again after a 409 end once it is set (`_cut_short`)
        self._stopping: Callable[[], bool] = _never
        self._observed: tuple[Any, ...] | None = None   # (holder, renewTime, transitions, duration) last seen
        self._observed_at = 0.0                          # our monotonic clock when we saw the record change
        self._observed_for = self.lease_duration_s       # the leaseDurationSeconds last seen on the Lease
        # `await_lease`'s verdict on its last wait, reached as it ended (`outwaited()` returns it): (holder,
        # leaseDurationSeconds, seconds watched) if it watched another identity's Lease unchanged to its end, cut
        # short of the Lease's duration; None otherwise (taken, renewed, out of reach, cut short: SIGTERM)
        self._outwaited: tuple[str, int, int] | None = None
        self._renewed_at: float | None = None            # our monotonic clock at our last successful write as holder
        self._state: str | None = None                   # our safety ledger, written to LEDGER_ANNOTATION
        self._inherited: str | None = None               # the ledger found on the Lease when we took it
        self._persisted: str | None = None               # the ledger on the Lease as of our last write to it
        self._released: str | None = None                # the ledger on the Lease as our `release()` left it
        # why the last try's read or write of the Lease failed (the API unreachable, 5xx, 403, or a 409: another
        # replica wrote first; or the try raised: `_try_acquire_or_renew`); None after a try whose calls all answered.
        # The one record of it: `save_state`'s reason (`_ledger_reason`) and `unreachable()` (a standby told from a
        # replica cut off from the API) read it
        self.last_failure: ActuationError | None = None
        # times we took the Lease (not renewals): the loop tells a lead lost and retaken between two of its asks
        # (as a renewer thread may) from one held throughout, and starts the new term afresh
        self.terms = 0

    def stop_when(self, stopping: Callable[[], bool]) -> None:
        """The command's stop flag (SIGTERM): once `stopping()`, `await_lease` waits no more and no takeover writes
        the Lease again after a 409, whoever makes the try (a `--once` run's first, `try_acquire`; its wait; the
        renewer thread): handed to `await_lease` alone, it did not reach the first try, and SIGTERM during its write
        (a 409 for a label edited) was followed by a read, a write that took the Lease, the cycle, and a release,
        more calls than SIGTERM's budget to exit counts (`LEASE_CALLS_TO_RELEASE`). The writes of a Lease we hold
        are what hand it over cleanly: a renewal ends at its 409 but keeps the lead, a save writes again once more
        (`_ends_try`), and so does `release()`: once `stopping()`, `STOPPED_SAVE_RETRIES` bounds the save's and the
        release's writes again (`_stopped_short`), not `TAKEOVER_CONFLICT_RETRIES`. The one way SIGTERM reaches the
        elector (`_cut_short`): `await_lease` takes no flag of its own."""
        self._stopping = stopping

    def _tick(self) -> float:
        """Now on the clock every local interval is measured on: `monotonic`, by default `time.monotonic` (a test
        clock set as `clock` alone stands for both)."""
        if self.monotonic is not None:
            return self.monotonic()
        return time.monotonic() if self.clock is _WALL else self.clock()

    @property
    def is_leader(self) -> bool:
        return self._renewed_at is not None and self._tick() - self._renewed_at < self.renew_deadline_s

    def _spec(self, now: float, acquired: float, transitions: int, holder: str, duration: int) -> Json:
        return {"holderIdentity": holder, "leaseDurationSeconds": duration, "acquireTime": micro_time(acquired),
                "renewTime": micro_time(now), "leaseTransitions": transitions}

    def start(self, thread: bool = True) -> None:
        """Acquire or renew now, then every `retry_period_s` from a daemon thread until `release()`. `thread=False`:
        the caller calls `renew()` itself (tests and simulations, on their own clock). Already leading (a `--once`
        run's try or wait just wrote the Lease), it does not write it again now: the thread's first renewal comes a
        retry period after that write, as if it had been the renewer's (`schedule --once` read and wrote the Lease
        twice in a row)."""
        self._background = True
        with self._lock:
            renewed = self._renewed_at
            since = self._tick() - renewed if renewed is not None and self.is_leader else None
            if since is None:
                self.renew()
            else:
                self._note_change()
        if thread:
            first = self.retry_period_s if since is None else max(0.0, self.retry_period_s - since)
            threading.Thread(target=self._renew_until_released, args=(first,), name=f"lease-{self.name}",
                             daemon=True).start()

    def _renew_until_released(self, first: float) -> None:
        wait = first
        while not self._halt.wait(wait):
            self.renew()
            wait = self.retry_period_s

    def renew(self) -> bool:
        """One try of the renewer: acquire or renew unless released; never raises (the thread must not die)."""
        with self._lock:
            if self._halt.is_set():
                return False
            try:
                won = self.try_acquire_or_renew()
            except Exception:
                log.exception("lease %s/%s: renewal failed", self.namespace, self.name)
                won = False
            self._note_change()
            return won and self.is_leader

    def _note_change(self) -> None:
        """Log once each change of the renewer's view (leading, or lost it)."""
        if self.is_leader != self._was_leader:
            self._was_leader = self.is_leader
            log.log(logging.INFO if self._was_leader else logging.WARNING, "lease %s/%s: %s %s", self.namespace,
                    self.name, self.identity, "leads" if self._was_leader else
                    "lost it (no renewal within the renew deadline, or another holder): it stops acting")

    def try_acquire_or_renew(self) -> bool:
        with self._lock:
            return self._try_acquire_or_renew()

    def _try_acquire_or_renew(self, save: bool = False) -> bool:
        """One try; the stop flag (`stop_when`) or `release()` ends its writes again after a 409 (`_ends_try`;
        `save`: `save_state`'s try, which SIGTERM does not end at once). One that raises (a client's
        ValueError on a reply it cannot read, past `_Api`) is recorded as failed (`last_failure`) before it
        propagates: left None, it read as a try that succeeded, and `save_state` reported a ledger the Lease held
        before it saved with no I/O (its moves held back released, held back again every cycle)."""
        try:
            return self._try(save)
        except Exception as exc:
            self.last_failure = exc if isinstance(exc, ActuationError) else TemporaryActuationError(
                f"lease {self.namespace}/{self.name}: {type(exc).__name__}: {exc}")
            raise

    def _try(self, save: bool) -> bool:
        """`_try_acquire_or_renew`'s try."""
        # `tick` (monotonic) before the calls: a write's success counts from before it was sent, never later
        now, tick, what = self.clock(), self._tick(), f"lease {self.namespace}/{self.name}"
        self.last_failure = None
        try:
            lease = self.api(what, self.api.coordination.read_namespaced_lease, self.name, self.namespace)
        except NotFoundError:   # deleted: created again, by the loop's ask or a save's try alike (9d26e402: the
            # ledger on it; `save_state`), and a Lease created is one taken: a new term, the loop takes office again
            body = self._body({}, self._spec(now, now, 0, self.identity, self.lease_duration_s))
            created = self._write(what, tick, self.api.coordination.create_namespaced_lease, self.namespace, body)
            self.terms += self.last_failure is None   # created: True from a 503 is the lead kept, not a Lease taken
            return created
        except ActuationError as err:
            log.warning("%s: %s", what, err)
            self.last_failure = err
            return self.is_leader
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = _record(spec)
        if record != self._observed:   # when WE saw it change, on our clock: the holder's renewTime is not trusted
            self._observed, self._observed_at = record, tick
        duration = self._observed_for = int(spec.get("leaseDurationSeconds") or self.lease_duration_s)
        if holder and holder != self.identity and self._observed_at + duration > tick:
            self._renewed_at = None
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (holder != self.identity)
        kept = parse_time(spec.get("acquireTime")) if holder == self.identity else None   # a renewal keeps it

        def ours(at: float) -> Json:   # dated when its write is sent: renewTime, a takeover's acquireTime
            return self._spec(at, kept or at, transitions, self.identity, self.lease_duration_s)

        taking_over = holder != self.identity or self._renewed_at is None
        # a save renews a Lease we hold, never takes one over (`save_state`): not_leader; a deleted one it creates
        # again above (a new term)
        if taking_over and save:
            self._renewed_at = None
            return False
        if taking_over:   # the Lease's ledger stays until the loop saves ours merged with it (class docstring)
            # and a lead we held is over: the Lease read is not ours (its holder cleared, or another's run out), so
            # a takeover write that fails (409, then a re-read that fails; a 503) must not leave it running
            self._state, self._renewed_at = None, None
        won, lease = self._take(what, (now, tick), lease, ours, lambda left: self._ends_try(save, left))
        if won and taking_over:
            self.terms += 1
            self._inherited = _ledger_on(lease)
        return won

    def _take(self, what: str, sent: tuple[float, float], lease: Json, ours: Callable[[float], Json],
              ends: Callable[[int], bool]) -> tuple[bool, Json]:
        """Write `ours(now)` over `lease` as read (`_body`: its resourceVersion, labels and annotations); whether it was
        written, and the Lease it was written over. A write (a takeover, a renewal, `_release`) that gets a 409 reads
        the Lease again (`_read_again`) and, its holder record (`_holder_record`) still the one judged (only metadata
        changed: a label, an annotation, resourceVersion), writes again over what was read, at most
        `TAKEOVER_CONFLICT_RETRIES` more times. Otherwise the 409 stays why (`last_failure`), and the lead
        (`_renewed_at`) is dropped only once the Lease is known lost (`_read_again`: read again, its holder record
        changed, or deleted): a re-read that failed (503), the retries run out or a try cut short (`ends(retries
        left)`: `_ends_try`, a release's `_stopped_short`) leave a held lead
        to run to its renew deadline, as after any failed renewal (the loop, asking `is_leader` meanwhile, must not
        see a lead lost and retaken; what follows reads the Lease afresh: the save, a renewal, `_release`, which
        writes only while the holder read is us). Dropped at every such 409, an annotation put on the leader's
        own Lease ended its lead whenever the re-read failed, and the next renewal counted a new term (the loop
        took office again, HPA floors given back); SIGTERM's renewal so cut short made the exit's save
        `not_leader` and `release()` make no call, the Lease left to expire.
        client-go's elector writes no more in that try (it tries again, read afresh, a retry period later); ours
        does because a --once run's wait (`await_lease`) ends at its first failed try: every 409 on a takeover left
        it a standby, behind a crashed holder's Lease only relabelled; and a renewal so answered ended the lead at
        once, the next renewal counting a new term (`terms`: the loop took office again, its planner state afresh).
        Each write again counts from when it is sent (`sent`: wall and monotonic clocks, anew): one after slow calls,
        counted from the try's start, won the Lease already past our renew deadline, not leader, so `release()` left
        it held; and dated then (renewTime, a takeover's acquireTime): dated at the try's start, a successor's
        hand-over (balancer/cmd/hand_over_floors.py: renewTime + duration) said the Lease held for less than it is.
        Cut short, no more calls: SIGTERM's budget to exit counts a renewal's read and write in flight
        (balancer/app/health.py), then the save's and the release's.
        A write again keeps the annotations read again but puts our ledger over an edit of it (`_annotations`), as
        our next renewal would: the holder's ledger is what it spent, what a successor must inherit."""
        judged, fn = _holder_record(lease.get("spec") or {}), self.api.coordination.replace_namespaced_lease
        (now, tick), retries = sent, TAKEOVER_CONFLICT_RETRIES
        while not self._write(what, tick, fn, self.name, self.namespace, self._body(lease, ours(now)), keep=True):
            again, lost = self._read_again(what, judged, retries, ends)
            if again is None:
                if lost:   # not ours until a write says so
                    self._renewed_at = None
                return False, lease
            # this write dated and its success counted from now, not from the try's start
            retries, now, tick = retries - 1, self.clock(), self._tick()
            lease, self.last_failure = again, None
        return True, lease

    def _read_again(self, what: str, judged: tuple, retries: int,
                    ends: Callable[[int], bool]) -> tuple[Json | None, bool]:
        """After a failed write of `_take`: the Lease read again, to be written over again, if the failure was a 409,
        retries are left, its holder record is still `judged` and the try is not cut short (`ends(retries)`, asked
        again after the read: `release()` may begin while it is in flight); None otherwise. And whether the Lease is
        lost: read again, its holder record changed (another contender took it, its holder renewed, ours edited) or
        it is gone (404). Not read (no retries left, cut short) or out of reach, nothing says so."""
        if retries <= 0 or not isinstance(self.last_failure, ConflictError) or ends(retries):
            return None, False
        try:
            again = self.api(what, self.api.coordination.read_namespaced_lease, self.name, self.namespace)
        except ActuationError as err:   # the 409 stays why
            log.info("%s: read again after a 409 on our write: %s", what, err)
            return None, isinstance(err, NotFoundError)
        if _holder_record(again.get("spec") or {}) != judged:
            return None, True
        if ends(retries):
            return None, False
        log.info("%s: 409 on our write, its holder record unchanged (metadata alone): written again", what)
        return again, False

    def _ends_try(self, save: bool, retries: int) -> bool:
        """Whether a try (a takeover, a renewal, or `save`: `save_state`'s, always of a Lease we hold) with `retries`
        writes again left ends at its 409 (`_take`). `release()` ends every try there: it reads the Lease and
        writes it next. SIGTERM (`_stopping`) ends a takeover's (no point taking a Lease we are about to give up)
        and a renewal's (the lead kept: the save or release that follows reads the Lease afresh), but a save
        writes again `STOPPED_SAVE_RETRIES` more times after it: the exit's ledger save is what hands over what
        this replica spent, and one 409 for a label edited failed it (the successor inherited an older ledger)."""
        return self._halt.is_set() or (self._stopped_short(retries) if save else self._stopping())

    def _stopped_short(self, retries: int) -> bool:
        """Whether a write of a Lease we hold on the way out (the exit's ledger save, `_release`) with `retries`
        writes again left ends at its 409: once SIGTERM came (`_stopping`), after `STOPPED_SAVE_RETRIES` of them,
        within SIGTERM's budget to exit (balancer/app/health.py)."""
        return self._stopping() and TAKEOVER_CONFLICT_RETRIES - retries >= STOPPED_SAVE_RETRIES

    def await_lease(self, pause: Callable[[float], object] | None = None) -> bool:
        """A `--once` contender whose try found the Lease another identity's: keep trying, a pause (`pause`, e.g.
        a SIGTERM's Event's wait; default until `release()`; `self.pause` if set) between tries, until the takeover
        rule of `try_acquire_or_renew` lets us take it (the record unchanged for its lease duration since we first
        saw it, on our clock: a crashed holder's Lease); True once we hold it. False as soon as the record changes
        (the holder renewed: a live holder does within its renew deadline, so a healthy standby leaves within about
        a lease duration; an edit of its leaseDurationSeconds alone is no renewal, a holder's write dates renewTime:
        it restarts the watch, from when we saw it, judged by the new duration, as it restarts the takeover rule's
        count: holder, renewTime, transitions and leaseDurationSeconds are compared; client-go's record adds
        acquireTime, which no write changes alone), a try cannot reach the Lease or finds it written meanwhile
        (`last_failure`; `unreachable()` tells the two apart for the caller), the stop flag (SIGTERM: `stop_when`)
        or `release()`, or once a try that began a lease duration and a pause after we last saw the record change
        did not take it. A single try never takes such a Lease: the holder's renewTime is on its clock, not ours, so
        a --once run (a CronJob) was a standby for ever behind a Lease nobody renewed. Call it with no renewer
        running (`start()` once it returns True): its tries are then the Lease's one reader, and the failure that
        ended it stays until the caller reads it (a renewer read the Lease twice per pause and reset `last_failure`
        in between).

        The pause is the Lease's, not ours (`_await_step`): a sixth of its lease duration, at most our retry period.
        Our own retry period follows our `--interval` (a 1 h interval: 30 min), which has nothing to do with the
        Lease found: paused so, a run behind a live holder's 15 s Lease waited 30 min to leave as a standby (a run
        of one try left at once), and one behind a dead holder's waited 12 h (a 24 h interval) to take it. The
        deadline is judged by the tick a try began at, as the takeover rule judges it: a slow read just before it
        (one call may take 5 s) must not end the wait with the Lease still to take.

        It waits at most the longer of our own lease duration and a third of the Lease's (`_most`): a Lease
        written with a longer one (3600 s: a holder with a 20 min --interval) held a --once run (a CronJob's, its
        deadline shorter) that long, and cut to our own alone (90 s at a 30 s --interval) it ended before a live
        holder's next renewal (every sixth of its lease) and took it for a crashed one. Ended so, the Lease
        neither taken nor seen renewed, `outwaited()` says so for the caller to report, not exit a standby; a wait
        cut short (SIGTERM, `release()`) is a standby's, however late in the wait it came."""
        with self._lock:
            self._outwaited = None
            seen, since, duration = self._observed, self._observed_at, self._observed_for
            if self.is_leader or self.last_failure is not None or seen is None or seen[0] in ("", self.identity):
                return self.is_leader
        pause, began = self.pause or pause or self._halt.wait, since
        step, most, deadline, tries = self._watch(since, duration)
        while tries > 0:   # the count of tries also ends it on a clock held still
            tries -= 1
            if self._cut_short():
                return self.is_leader
            if began >= deadline:
                break
            pause(step)
            if self._cut_short():
                return self.is_leader
            with self._lock:
                began = self._tick()
                self._try_acquire_or_renew()
                now_seen = self._observed or ()
                if self.is_leader or self.last_failure is not None or now_seen[:3] != seen[:3]:
                    return self.is_leader   # taken, out of reach, renewed (or released, taken by another)
                if now_seen != seen:   # its leaseDurationSeconds alone edited, no renewal: watched afresh from now
                    seen, since, duration = now_seen, self._observed_at, self._observed_for
                    step, most, deadline, tries = self._watch(since, duration)
        if self._cut_short():   # in the last try's calls: cut short, not waited out (a standby)
            return self.is_leader
        with self._lock:   # reached its end neither taken nor renewed: watched so long, not the Lease's duration?
            if duration > most and self._tick() - since >= most:
                self._outwaited = seen[0], duration, most   # the wait's own figures: what it waited is what is said
        return self.is_leader

    def _cut_short(self) -> bool:
        """Whether `await_lease`'s wait (or a try's writes again after a 409, `_take`) ends now, a standby's: SIGTERM
        (the command's flag, handed over once: `stop_when`) or `release()`."""
        return self._stopping() or self._halt.is_set()

    def _watch(self, since: float, duration: int) -> tuple[float, int, float, int]:
        """`await_lease`'s watch of a Lease of `duration` s whose record we saw change at `since`: its pause, how
        long it watches (the cut logged), the tick from which a try that did not take it ends the wait, and the
        most tries it makes."""
        step, most = self._await_step(duration), self._most(duration)
        if most < duration:
            log.warning("lease %s/%s: its leaseDurationSeconds %d is longer than a --once run waits for it (%d s: "
                        "the longer of our own, %d s, and a third of it, two of a live holder's renewals): unless "
                        "renewed within that, neither taken nor known to be a live holder's", self.namespace,
                        self.name, duration, most, self.lease_duration_s)
        return step, most, since + most + step, int((most + step) / step) + 1

    def unreachable(self) -> ActuationError | None:
        """Why the last try could not read or write the Lease (`last_failure`: the API unreachable, failing or
        refusing); None after one that could, a 409 included (it reached the Lease: another replica wrote first).
        What a `--once` standby says it is: cut off from the API, or behind another replica's Lease."""
        with self._lock:
            failure = self.last_failure
        return None if isinstance(failure, ConflictError) else failure

    def _most(self, duration: int) -> int:
        """How long `await_lease` watches a Lease of `duration` s: all of it, unless longer than both our own lease
        duration (what we would make a successor wait) and a third of it, the longer of which it waits. A third is
        two renewal periods of a live gputide holder (a quarter of a renew deadline of two thirds: a sixth of its
        lease; client-go's, 2 s of 15 s, are shorter), so one renewal slow or failed still leaves one to see: cut
        to our own alone, a run at the default 30 s --interval (90 s) beside a holder at 20 min (a 3600 s Lease,
        renewed every 600 s) saw no renewal most times and said a healthy holder's Lease outwaited, exit 3."""
        return min(duration, max(self.lease_duration_s, -(-duration // 3)))

    def outwaited(self) -> tuple[str, int, int] | None:
        """(holder, leaseDurationSeconds, seconds watched) of another identity's Lease that `await_lease` watched
        unchanged to the end of its wait (`_most`: shorter than the Lease's duration; the figures that wait used,
        so what is said is what was waited) and so neither took (a crashed holder's is taken only once unchanged
        for its own duration) nor saw renewed (a live holder's); None otherwise (held, renewed meanwhile, out of
        reach, or a wait cut short: SIGTERM, even in its last pause, is a standby's, as the docs say). The verdict
        `await_lease` reached as that wait ended, not judged again here."""
        with self._lock:
            return self._outwaited

    def _await_step(self, duration: int) -> float:
        """`await_lease`'s pause between tries for a Lease of `duration` s: a sixth of it (as our own retry period
        is of our own Lease: a quarter of a renew deadline of two thirds; 2.5 s of 15 s), so about six tries watch
        it for its lease duration whoever wrote it, and a standby leaves within that of the holder's renewal; at
        most our retry period (a long Lease's renewal or release is seen as soon as our own renewer would see it)."""
        return min(self.retry_period_s, duration / 6)

    def _body(self, lease: Json, spec: Json) -> Json:
        """The Lease to write over `lease` as read ({}: none, a create): its metadata as read (resourceVersion,
        labels, annotations we do not own, owner references), with our ledger (`_annotations`), and `spec`. A
        replace drops what it does not carry: sent with our annotations alone, every renewal dropped the labels
        someone set on the Lease (client-go's Update sends back the object it read)."""
        metadata = {**(lease.get("metadata") or {}), "name": self.name, "namespace": self.namespace,
                    "annotations": self._annotations(lease)}
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    def _annotations(self, lease: Json) -> dict[str, str]:
        """The Lease's annotations, with our safety ledger when we have one (a replace must carry them all)."""
        out = dict(_annotations_on(lease))
        if self._state is not None:
            out[LEDGER_ANNOTATION] = self._state
        return out

    def load_state(self) -> str | None:
        """The safety ledger the previous holder left on the Lease (once, after we took it over)."""
        with self._lock:   # the renewer thread sets it when it takes the Lease over
            text, self._inherited = self._inherited, None
        return text

    def save_state(self, text: str) -> int:
        """Keep our safety ledger on the Lease for whoever holds it next, written now; the entries left out to fit.
        A ledger over `MAX_LEDGER_BYTES` is cut to fit, the entries that restrain least first (`balancer.ledger_fit`),
        with a warning, rather than left unwritten (a successor then inherited an older ledger, or none). One that
        cannot be cut (it is no ledger) raises ValueError and the Lease keeps the last one saved: the caller tries
        again. So does a write that fails, or one this replica may not make (it does not hold the Lease):
        `LedgerNotSaved`, the ledger kept for our next write as holder (the renewer's, if it comes first).
        No write is made only while the Lease holds `text` as of a try that succeeded: after one that failed (a
        reservation the Lease did not take, a renewal, one that raised) the ledger before it, still on the Lease, is
        written again, and the failure raised. Reported saved with no I/O, it told the loop the Lease takes writes
        again: the moves held back for the reservation went back to the planner, to be held back again every cycle.
        Not the leader after the try, `not_leader` whatever the Lease held as of our last write: a replica that does
        not hold the Lease cannot tell (another may have taken it, or a write we never heard back from landed), and
        a silent return is a ledger said saved. Not the leader before it, with a renewer thread (`start()`), no try:
        it keeps the Lease, its renewals failed to the deadline; without one (`run --once`, the soak: the loop's
        asks renew it) the save is the try: a lead that merely ran out its renew deadline between two asks (a long
        cycle), the Lease still ours and holding the ledger, was refused with no call, and `run --once` exited
        saying its successor inherits an older ledger. A save's try renews a Lease we hold, never takes one over (a
        takeover is the loop's ask, `try_acquire`): a Lease released (holder "") or another's is `not_leader`, no
        write, as `InMemoryLeaderElector` refuses a Lease it does not hold; taken over by a save, a released Lease
        got us as holder and a new term, our ledger dropped for the one found (`_state` None), while the save
        raised `not_leader` and said its ledger kept. A deleted Lease is the exception (9d26e402): the save's try
        creates it again, us as holder and this ledger on it (a create takes the Lease from no one: one written
        meanwhile answers 409), and that starts a new term (`terms` + 1: the loop takes office again, its planner
        state afresh); refused, a `run --once` whose Lease was deleted before its save exited 4, its ledger on no
        Lease (tests/k8s/test_k8s_lease_save_recreates.py). A try that raises other than `ActuationError` raises
        `LedgerNotSaved` (`error`) from it: a ValueError out of a reply was counted `invalid`, a ledger that cannot
        be cut to fit. After SIGTERM (`stop_when`) its write again after a 409 is still made, once (`_ends_try`).
        After `release()` no try (a save takes no Lease back): a ledger that release wrote onto the Lease (`_released`,
        the text of a save that failed before it: `run --once`'s exit save answered 409 twice after SIGTERM) is
        saved, and `run --once` says so (it exited 4 saying its successor inherits an older ledger); else
        `not_leader`."""
        text, dropped = fit(text, MAX_LEDGER_BYTES)
        if dropped:
            log.warning("safety ledger over the Lease annotation's %d bytes: %d oldest entries (cooldowns first, "
                        "evictions last) left out of what a successor inherits", MAX_LEDGER_BYTES, dropped)
        with self._lock:
            self._state, failure = text, None
            stale = self._persisted != text or self.last_failure is not None
            released = self._halt.is_set() and not self.is_leader   # no try: a save takes no Lease back
            if released and self._released == text:   # our release wrote it: whoever takes the Lease inherits it
                return dropped
            if not released and (stale if self.is_leader else not self._background):   # no renewer: the save tries
                failure = self._save_try()   # this try's (an earlier try's, the renewer's, is not why)
            if self._persisted != text or failure is not None or not self.is_leader:
                reason = "not_leader" if failure is None else _ledger_reason(failure)
                raise LedgerNotSaved(reason, f"lease {self.namespace}/{self.name}: safety ledger not written "
                                             f"({reason}); kept for the next write as holder")
        return dropped

    def _save_try(self) -> ActuationError | None:
        """`save_state`'s try: why it failed (`last_failure`), None if it did not; raised, `LedgerNotSaved`."""
        try:
            self._try_acquire_or_renew(save=True)
        except Exception as exc:
            reason = _ledger_reason(exc) if isinstance(exc, ActuationError) else "error"
            raise LedgerNotSaved(reason, f"lease {self.namespace}/{self.name}: safety ledger not written ({exc!r}); "
                                         "kept for the next write as holder") from exc
        return self.last_failure

    def try_acquire(self, now: float) -> bool:
        """The loop's LeaderElector protocol: True while this replica may act. With a renewer thread (`start()`)
        the flag it keeps (no I/O: the loop asks before every action); without one, acquire or renew now."""
        return self.is_leader if self._background else self.try_acquire_or_renew()

    def _write(self, what: str, tick: float, fn: Callable[..., Any], *args: Any, keep: bool = False) -> bool:
        """`tick`: the monotonic clock before this write was sent (its try's start, or `_take`'s write again): what the
        renew deadline and lease duration count from. A 409 ends our lead at once unless `keep` (`_take`: it reads
        the Lease again first). True once written; a failure other than 409 (a 503) answers `is_leader`, the lead
        kept to its renew deadline: a caller that must know a write landed reads `last_failure` (a create's term,
        `_release`)."""
        try:
            written = self.api(what, fn, *args)
        except ActuationError as err:   # 409: another contender wrote first; others: try again next cycle
            log.info("%s: %s is not leader: %s", what, self.identity, err)
            self.last_failure = err
            if isinstance(err, ConflictError):   # the Lease changed since we read it: not ours until a renewal says so
                if not keep:
                    self._renewed_at = None
                return False
            return self.is_leader
        spec = written.get("spec") or {}
        self._persisted = _ledger_on(written)
        self._observed, self._released = _record(spec), None
        self._observed_at = self._renewed_at = tick
        return True

    def release(self) -> bool:
        """Give the lease up (holderIdentity empty) so another replica takes over at once; True if released. Stops
        the renewer first (after the renewal in flight, if any), so it cannot take the Lease back."""
        self._halt.set()
        with self._lock:
            return self._release()

    def _release(self) -> bool:
        """`release()`'s read and write: the holder cleared, our ledger carried (`_body`), while the Lease read is
        ours. A 409 is written again as a renewal's is (`_take`: read again, its holder record unchanged, at most
        `TAKEOVER_CONFLICT_RETRIES` more writes, after SIGTERM `STOPPED_SAVE_RETRIES`: `_stopped_short`): failed at
        one 409 for a label or annotation edited meanwhile, the successor waited out a whole lease duration. A
        release is no try: `last_failure` stays the last try's (`unreachable()`, `save_state` read it)."""
        if not self.is_leader:
            return False
        now, tick, what, failure = self.clock(), self._tick(), f"lease {self.namespace}/{self.name}", self.last_failure
        try:
            lease = self.api(what, self.api.coordination.read_namespaced_lease, self.name, self.namespace)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return False
            transitions, self.last_failure = int(spec.get("leaseTransitions") or 0), None
            written, _ = self._take(what, (now, tick), lease, lambda at: self._spec(at, at, transitions, "", 1),
                                    self._stopped_short)
            if not written or self.last_failure is not None:   # a 503's `_write` answers `is_leader`, no write
                log.warning("%s: release failed: %s", what, self.last_failure)
                return False
            self._released = self._persisted   # the ledger the write put on the Lease (`_write`)
        except ActuationError as err:
            log.warning("%s: release failed: %s", what, err)
            return False
        finally:
            self._renewed_at, self.last_failure = None, failure
        return True


def _annotations_on(lease: Json) -> dict[str, str]:
    """`lease`'s annotations as read or written ({} when it has none, or no metadata)."""
    return (lease.get("metadata") or {}).get("annotations") or {}


def _ledger_on(lease: Json) -> str | None:
    """The safety ledger `lease` carries (`LEDGER_ANNOTATION`), None when it carries none."""
    return _annotations_on(lease).get(LEDGER_ANNOTATION)


def _ledger_reason(err: ActuationError) -> str:
    """`LedgerNotSaved.reason` for a failed call to the Lease."""
    if isinstance(err, ConflictError):
        return "conflict"
    return "unavailable" if isinstance(err, TemporaryActuationError) else "refused"


# ---- client construction -------------------------------------------------------------------------------------
