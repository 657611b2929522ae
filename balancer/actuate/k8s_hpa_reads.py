"""The HPAs read for the capacity planner (`ServiceStatus.hpa_wants`): what each one keeps on its own metrics,
gputide's floor aside (`k8s_hpa_wants`), by the "namespace/target" it scales.

One cluster-wide list per `ttl_s` (the rights capacity shifting holds already: components/capacity; built only with
--services, `_run_parts.hpa_source`), never a watch: an HPA's status changes at every sync of its controller (15 s),
and the planner needs it once a cycle. Each list's recommendation per HPA (`k8s_hpa_wants.recommendation`) is
remembered for the hour a scale-down window may last, since the status shows none of those the controller keeps the
highest of: what a loan may count is the highest seen within the window (`k8s_hpa_wants.History`); an HPA watched
less than its window keeps its replicas. A failed list keeps the last answer (logged; tried again at the next call),
as the pods' reads do, but only while it is recent: none listed for `STALE_TTLS` ttls (an HPA's metrics move within
that) is None again, as before the first list (the telemetry then has every service lend nothing:
`serving.with_hpa_wants`), logged once; the recommendations of the gap were not seen, so every HPA is watched anew.
Why a count is not the algorithm's plain answer (a metric missing, the stabilisation window) is logged once while it
lasts.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from balancer.actuate.k8s_hpa_wants import History, recommendation, wants_by_target
from balancer.actuate.kubernetes import _Api
from balancer.errors import ActuationError

log = logging.getLogger(__name__)
WINDOW_MAX_S = 3600.0   # the longest stabilizationWindowSeconds the API accepts
STALE_TTLS = 3.0   # a last answer older than this many ttls is none


class KubernetesHpaWants:
    """`hpa_wants` for `PrometheusTelemetrySource`: {"namespace/target": (replicas or None, why)} (module docstring)."""

    def __init__(self, api_client: Any, ttl_s: float = 10.0, clock: Callable[[], float] = time.time, *,
                 max_retries: int = 1, sleep: Callable[[float], None] = time.sleep) -> None:
        self.api = _Api(api_client, max_retries, 0.5, sleep, 10.0)
        self.ttl_s, self.clock = ttl_s, clock
        self._at = -math.inf
        self._hpas: dict[str, dict] | None = None
        self._said: dict[str, str] = {}   # target -> the note last logged
        self._seen: dict[str, History] = {}   # namespace/name -> what each list showed of it
        self._stale = False   # whether the last call found the last list too old (logged once)

    def __call__(self) -> dict[str, tuple[int | None, str]] | None:
        now = self.clock()
        if now - self._at >= self.ttl_s:
            try:
                listed = self.api("list HPAs", self.api.autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces)
            except ActuationError as err:
                log.warning("HPAs unavailable, keeping the last answer while recent: %s", err)
            else:
                self._hpas = {f"{(h.get('metadata') or {}).get('namespace')}/{(h.get('metadata') or {}).get('name')}": h
                              for h in listed.get("items") or []}
                self._at = now
                self._remember(now)
        if self._hpas is None or self._too_old(now):
            return None
        wants = wants_by_target(self._hpas, now, self._seen)
        said = {target: note for target, (_, note) in wants.items() if note}
        for target, note in said.items():
            if self._said.get(target) != note:
                log.info("hpa of %s: a loan frees only the replicas above %s (%s)", target, wants[target][0], note)
        self._said = said
        return wants

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

    def _remember(self, now: float) -> None:
        """Each listed HPA's recommendation now, with those of the last hour; an HPA gone is forgotten."""
        seen = {}
        for key, h in (self._hpas or {}).items():
            old = self._seen.get(key) or History(since=now)
            n, _ = recommendation(h, now)
            kept = tuple((at, m) for at, m in old.seen if now - at < WINDOW_MAX_S)
            seen[key] = History(old.since, kept + (((now, n),) if n is not None else ()))
        self._seen = seen
