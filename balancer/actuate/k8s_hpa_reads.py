"""The HPAs read for the capacity planner (`ServiceStatus.hpa_wants`): what each one keeps on its own metrics,
gputide's floor aside (`k8s_hpa_wants`), by the "namespace/target" it scales.

One cluster-wide list per `ttl_s` (the rights capacity shifting holds already: components/capacity; built only with
--services, `_run_parts.hpa_source`), never a watch: an HPA's status changes at every sync of its controller (15 s),
and the planner needs it once a cycle. Each list's recommendation per HPA (`k8s_hpa_wants.recommendation`) is
remembered for the hour a scale-down window may last, since the status shows none of those the controller keeps the
highest of: what a loan may count is the highest seen within the window (`k8s_hpa_wants.History`); an HPA watched
less than its window keeps its replicas. It is watched anew (nothing seen) when its lists have a gap of more than
`STALE_TTLS` ttls (the reader not called, or its lists failing: the recommendations of the gap were not seen) and
when it is recreated (a new uid: the controller starts its window anew, at its replicas). A failed list keeps the
last answer (logged; tried again at the next call), as the pods' reads do, but only while it is recent: none listed
for `STALE_TTLS` ttls (an HPA's metrics move within that) is None again, as before the first list (the telemetry then
has every service lend nothing: `serving.with_hpa_wants`), logged once. So is a list holding an HPA whose target
cannot be read (an object of an odd shape): the service it scales is not known, and one read as having no HPA would
lend every replica above its floor. Times are the `clock`'s (monotonic: a wall clock stepped back neither stops the
lists nor stretches a window); only `status.lastScaleTime` is compared with the `wall` clock. Why a count is not the
algorithm's plain answer (a metric missing, the stabilisation window, an HPA unreadable) is logged once while it
lasts. Why a call answers None ("unlisted", "stale", "odd"; "" when usable) is also told at each call to `report`
(the controller's `gputide_hpa_reads_unusable{reason}`, `ControllerMetrics.set_hpa_reads_unusable`, which a standby,
calling no reader, clears): loans stopped by it were otherwise seen only in the log.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from balancer.actuate.k8s_hpa_wants import History, Recommended, recommend, scaled_target, wants_by_target
from balancer.actuate.kubernetes import _Api
from balancer.errors import ActuationError

log = logging.getLogger(__name__)
WINDOW_MAX_S = 3600.0   # the longest stabilizationWindowSeconds the API accepts
STALE_TTLS = 3.0   # a last answer older than this many ttls is none


class KubernetesHpaWants:
    """`hpa_wants` for `PrometheusTelemetrySource`: {"namespace/target": (replicas or None, why)} (module docstring)."""

    def __init__(self, api_client: Any, ttl_s: float = 10.0, clock: Callable[[], float] = time.monotonic, *,
                 wall: Callable[[], float] = time.time, max_retries: int = 1,
                 sleep: Callable[[float], None] = time.sleep,
                 report: Callable[[str], None] | None = None) -> None:
        """`report`: told at each call why its answer is unusable ("" usable; module docstring)."""
        self.api = _Api(api_client, max_retries, 0.5, sleep, 10.0)
        self.ttl_s, self.clock, self.wall = ttl_s, clock, wall
        self._at = -math.inf
        self._hpas: dict[str, dict] | None = None
        self._odd = False   # whether the last list held an item whose target could not be read (logged once)
        self._said: dict[str, str] = {}   # target -> the note last logged
        self._seen: dict[str, History] = {}   # namespace/name -> what each list showed of it, in `clock` time
        self._uid: dict[str, str] = {}   # namespace/name -> its uid at the last list
        self._stale = False   # whether the last call found the last list too old (logged once)
        self.report = report or (lambda _why: None)

    def __call__(self) -> dict[str, tuple[int | None, str]] | None:
        now, wall = self.clock(), self.wall()
        gap = now - self._at > STALE_TTLS * self.ttl_s   # since the last list (`_remember`)
        listed = now - self._at >= self.ttl_s and self._list(now)
        why = "unlisted" if self._hpas is None else "stale" if self._too_old(now) else "odd" if self._odd else ""
        self.report(why)
        # each HPA's recommendation once a call, for its history and for its answer alike
        recommended = {key: recommend(h, wall) for key, h in (self._hpas or {}).items()} if listed or not why else {}
        if listed:
            self._remember(now, recommended, gap)
        if why:
            return None
        wants = wants_by_target(self._hpas, wall, self._in_wall_time(now, wall), recommended)
        said = {target: note for target, (_, note) in wants.items() if note}
        for target, note in said.items():
            if self._said.get(target) != note:
                log.info("hpa of %s: a loan frees only the replicas above %s (%s)", target, wants[target][0], note)
        self._said = said
        return wants

    def _list(self, now: float) -> bool:
        """List the HPAs; whether it did (a failure keeps the last list)."""
        try:
            listed = self.api("list HPAs", self.api.autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces)
        except ActuationError as err:
            log.warning("HPAs unavailable, keeping the last answer while recent: %s", err)
            return False
        items = listed.get("items") or [] if isinstance(listed, dict) else []
        items = items if isinstance(items, list) else [None]   # not a list: one odd item
        odd = [i for i, h in enumerate(items) if scaled_target(h) is None]
        if odd and not self._odd:
            log.warning("HPAs unreadable (items %s of the list: whom they scale is not known): none known, every "
                        "service lends nothing", odd)
        elif self._odd and not odd:
            log.info("HPAs readable again: loans under them resume")
        self._odd = bool(odd)
        hpas = {f"{(h.get('metadata') or {}).get('namespace')}/{(h.get('metadata') or {}).get('name')}": h
                for i, h in enumerate(items) if i not in odd}
        self._hpas, self._at = hpas, now
        return True

    def _in_wall_time(self, now: float, wall: float) -> dict[str, History]:
        """What was seen of each HPA, its times moved to the wall clock's now (`k8s_hpa_wants` compares them with
        `status.lastScaleTime`'s)."""
        return {key: History(wall - (now - h.since), tuple((wall - (now - at), n) for at, n in h.seen))
                for key, h in self._seen.items()}

    def _too_old(self, now: float) -> bool:
        """Whether the last list is too old to count (module docstring); its history is then forgotten."""
        old = now - self._at > STALE_TTLS * self.ttl_s
        if old:
            self._seen = {}
            if not self._stale:
                log.warning("HPAs not listed for %.0f s: none known, every service lends nothing", now - self._at)
        elif self._stale:
            log.info("HPAs listed again")
        self._stale = old
        return old

    def _remember(self, now: float, recommended: dict[str, Recommended], gap: bool) -> None:
        """Each listed HPA's recommendation now (`recommended`), with those of the last hour; an HPA gone is forgotten,
        one recreated or listed after a `gap` watched anew (module docstring)."""
        seen, uids = {}, {}
        for key, h in (self._hpas or {}).items():
            uids[key] = str((h.get("metadata") or {}).get("uid") or "")
            old = self._seen.get(key)
            if gap or old is None or self._uid.get(key) != uids[key]:
                old = History(since=now)
            rec = recommended.get(key)
            n = rec[0] if isinstance(rec, tuple) else None   # raised: unknown to `safe_wants` too, which says why
            kept = tuple((at, m) for at, m in old.seen if now - at < WINDOW_MAX_S)
            seen[key] = History(old.since, kept + (((now, n),) if n is not None else ()))
        self._seen, self._uid = seen, uids
