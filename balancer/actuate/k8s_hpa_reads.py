"""The HPAs read for the capacity planner (`ServiceStatus.hpa_wants`): what each one keeps on its own metrics,
gputide's floor aside (`k8s_hpa_wants`), by the "namespace/target" it scales.

One cluster-wide list per `ttl_s` (the rights capacity shifting holds already: components/capacity; built only with
--services, `_run_parts.hpa_source`), never a watch: an HPA's status changes at every sync of its controller (15 s),
and the planner needs it once a cycle. A failed list keeps the last answer (logged; tried again at the next call),
as the pods' reads do; None until one has answered (the telemetry then has every service lend nothing:
`serving.with_hpa_wants`). Why a count is not the algorithm's plain answer (a metric missing, the stabilisation
window) is logged once while it lasts.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from balancer.actuate.k8s_hpa_wants import wants_by_target
from balancer.actuate.kubernetes import _Api
from balancer.errors import ActuationError

log = logging.getLogger(__name__)


class KubernetesHpaWants:
    """`hpa_wants` for `PrometheusTelemetrySource`: {"namespace/target": (replicas or None, why)} (module docstring)."""

    def __init__(self, api_client: Any, ttl_s: float = 10.0, clock: Callable[[], float] = time.time, *,
                 max_retries: int = 1, sleep: Callable[[float], None] = time.sleep) -> None:
        self.api = _Api(api_client, max_retries, 0.5, sleep, 10.0)
        self.ttl_s, self.clock = ttl_s, clock
        self._at = -math.inf
        self._hpas: dict[str, dict] | None = None
        self._said: dict[str, str] = {}   # target -> the note last logged

    def __call__(self) -> dict[str, tuple[int | None, str]] | None:
        now = self.clock()
        if now - self._at >= self.ttl_s:
            try:
                listed = self.api("list HPAs", self.api.autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces)
            except ActuationError as err:
                log.warning("HPAs unavailable, keeping the last answer: %s", err)
            else:
                self._hpas = {f"{(h.get('metadata') or {}).get('namespace')}/{(h.get('metadata') or {}).get('name')}": h
                              for h in listed.get("items") or []}
                self._at = now
        if self._hpas is None:
            return None
        wants = wants_by_target(self._hpas, now)
        said = {target: note for target, (_, note) in wants.items() if note}
        for target, note in said.items():
            if self._said.get(target) != note:
                log.info("hpa of %s: a loan frees only the replicas above %s (%s)", target, wants[target][0], note)
        self._said = said
        return wants
