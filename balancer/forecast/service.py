"""The controller's per-service forecasts, fed from what each cycle observes: `ServiceForecaster`.

The loop wants `forecast(snapshot) -> {service: Forecast}`; the online forecaster
(`balancer.forecast.online.DemandForecaster`) keeps one model per service and needs their demand one observation at
a time. `ServiceForecaster` sits between them: it feeds every service's demand each cycle, seeds a service seen for
the first time with its history (a Prometheus range query, asked again on later cycles while it fails:
`HistorySeeds`, shared with the burst tracker), spreads model fits over cycles and keeps a service's last forecast
while its fit waits. `horizon_label` writes a horizon as the Prometheus duration the forecast series are labelled
with.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

from balancer.errors import GputideError
from balancer.model import ClusterSnapshot, Forecast, placed

log = logging.getLogger(__name__)
# how many steps before now the forecast the controller serves may be issued (`Forecast.issued_at`): one issued now
# is under 2 (the start of the bucket before the current one), one kept while a fit waits is served up to this old.
# The forecast is asked for as many steps past the horizon (`ServiceForecaster.steps`), so the oldest one served
# still reaches the end of the planner's window [now, now + horizon]
MAX_AGE_STEPS = 4


class HistorySeeds:
    """Which services have had their past demand read from `history` (``history(service, now) -> pd.Series |
    None``; None: the query was answered with no data, a new service, which counts as read), and asking again, on
    later cycles, for those whose query failed (it raised `GputideError`). Where `history` has a ``read`` method
    (`balancer.app.capacity_run.PrometheusDemandHistory`, whose call answers None for a failure too), that is what
    is asked, so a failure is told apart from no data.

    Bounded: in one cycle (one `now`) services are asked, the longest waiting first, until one query fails; the rest
    wait for the next cycle. While Prometheus is down that is one failed query (one timeout) a cycle, not one per
    service; once it is back every waiting service is read in the cycle that finds it back. A service whose own
    query keeps failing goes to the back of the queue and holds no other one back for more than a cycle."""

    def __init__(self, history: Callable[[str, float], Any] | None) -> None:
        self.read = getattr(history, "read", history)
        self.seeded: set[str] = set()
        self.waiting: dict[str, float] = {}   # service -> when its query last failed
        self._failed_at = math.nan            # the `now` of the last failed query

    def take(self, names: Iterable[str], now: float) -> dict[str, Any]:
        """{service: its past demand (None: none)} for those of `names` read now: every one not read before, while
        no query has failed at this `now`; each such service is then seeded and never asked again (until `forget`).
        Without `history` every service counts as read at once, with no past."""
        todo = [n for n in names if n not in self.seeded]
        if self.read is None:
            self.seeded.update(todo)
            return dict.fromkeys(todo)
        out = {}
        for name in sorted(todo, key=lambda n: self.waiting.get(n, -math.inf)):
            if self._failed_at == now:
                break
            try:
                out[name] = self.read(name, now)
            except GputideError as exc:   # asked again next cycle (`PrometheusDemandHistory` logs it once)
                log.debug("no demand history for %s yet: %s", name, exc)
                self.waiting[name] = self._failed_at = now
                continue
            self.waiting.pop(name, None)
            self.seeded.add(name)
        return out

    def forget(self, name: str) -> None:
        self.seeded.discard(name)
        self.waiting.pop(name, None)


class ServiceForecaster:
    """Adapts an online per-service forecaster (`balancer.forecast.online.DemandForecaster`: `update`, `forecast`,
    `rolling_error`) to the loop's `forecast(snapshot) -> {service: Forecast}`: each call feeds every service's
    demand now and forecasts `horizon_s` ahead; a service without enough history yet is left out.

    With `history` (``history(service, now) -> pd.Series | None``, e.g. a Prometheus range query), a service is
    seeded with its past demand the first time it is seen, so a restarted controller forecasts at once. A service
    whose query failed (`HistorySeeds`) is asked again on later cycles and, until it is seeded, is not fed and gets
    no forecast (the capacity planner holds it, or follows its demand up): a forecast learned from the minutes
    observed since a restart would lend its replicas as if the night were the whole day. Its observations meanwhile
    are in its history when that comes. `unseeded()` lists such services.

    Model fits are spread over cycles: at most `max_fits_per_cycle` services (re)fit in one cycle (a fit can take
    seconds, and every service seeded at start-up would otherwise refit in the same cycle every day, stalling
    hotspot protection); a service whose fit waits keeps its previous forecast for that cycle, or has none yet
    (the capacity planner then holds it, or follows its demand up).

    A service whose forecast the online forecaster refuses (too little history for a tidal forecast: a new or
    renamed service, or one whose past Prometheus lost; or demand last seen longer ago than a forecast may be issued
    from) gets none either, and the planner holds it: the refusal is logged as a warning once while it lasts (again
    if its reason changes), and its end at info. `unseeded()` lists the services whose history is too short for
    their model's daily season too (the ``gputide_forecast_history_waiting`` gauge).

    A service whose demand a snapshot shows unknown (`ClusterSnapshot.demand_unknown`: a stalled vLLM pod) is a gap
    that cycle: not fed, no forecast, and still seen. So is one seen before whose pods still run on GPUs with no
    serving series at all (every scrape of it lost; the capacity planner holds for it when profiled): before, it was
    forgotten after a day, history and model, while the same gap read NaN kept it. Not one whose series go on under
    other names or in another shard (`_running_unread`).

    A service no snapshot has shown for `forget_after_s` (a day: deleted or renamed, not a telemetry gap) is
    forgotten, its history and model included, so a controller running for months does not keep every service it
    ever saw; if it comes back it is seeded again from its history."""

    def __init__(self, online: Any, horizon_s: float, history: Callable[[str, float], Any] | None = None,
                 max_fits_per_cycle: int = 2, forget_after_s: float = 86400.0) -> None:
        self.online = online
        # a forecast is issued at the start of the last complete bucket (up to 2 steps before now) and one kept while
        # a fit waits is older still, served up to MAX_AGE_STEPS: the steps past the horizon cover the oldest one
        # served, so the planner's window [now, now + horizon] ends inside the forecast, not beyond it (3 steps
        # past it, one kept 4 steps ended a step short: `Forecast.window_max` read what it had, a rise at the end of
        # a reclaim's lead unread)
        self.steps = max(math.ceil(horizon_s / online.step_s), 1) + MAX_AGE_STEPS
        self.history = history
        self.max_fits_per_cycle = max_fits_per_cycle
        self.forget_after_s = forget_after_s
        self.seeds = HistorySeeds(history)
        self.last: dict[str, Forecast] = {}
        self.seen: dict[str, float] = {}   # service -> the last snapshot time that showed it
        self.refused: dict[str, str] = {}  # service -> why its forecast is refused now (`_refused`)

    def _forget_gone(self, now: float) -> None:
        for name in [n for n, t in self.seen.items() if now - t > self.forget_after_s]:
            log.info("forecaster: forgetting %s, not seen for %.0f h", name, (now - self.seen.pop(name)) / 3600)
            self.seeds.forget(name)
            self.last.pop(name, None)
            self.refused.pop(name, None)
            if hasattr(self.online, "forget"):
                self.online.forget(name)

    @property
    def seeded(self) -> set[str]:
        return self.seeds.seeded

    def unseeded(self) -> list[str]:
        """The services seen that wait for their history (a query failed, or what was read and observed since is
        too short for a forecast): no forecast meanwhile."""
        return sorted(n for n in self.seen if n not in self.seeds.seeded or self.refused.get(n) == "tide")

    def _seed(self, name: str, now: float) -> bool:
        """Seed `name` if its history can be read now; False while it cannot."""
        self._seed_all([name], now)
        return name in self.seeds.seeded

    def _seed_all(self, names: Iterable[str], now: float) -> None:
        for name, past in self.seeds.take(names, now).items():
            if past is not None and len(past):
                self.online.observe_history(name, past[past.index.as_unit("s").asi8 < now])

    def __call__(self, snap: ClusterSnapshot) -> dict[str, Forecast]:
        out = {}
        fits = 0
        due = getattr(self.online, "fit_due", None)
        self._forget_gone(snap.time)
        self._seed_all(snap.services, snap.time)
        # a demand unknown is a gap: never fed (read as 0 it would teach the model an idle hour), but seen, so one
        # unknown for a day is not a service gone
        for name in snap.demand_unknown:
            self.seen[name] = snap.time
        for name in _running_unread(snap, self.seen):   # series lost, pods on
            self.seen[name] = snap.time
        for name, status in snap.services.items():
            self.seen[name] = snap.time
            if name not in self.seeds.seeded:
                continue   # its history query failed: asked again next cycle, no forecast until then
            self.online.update(name, snap.time, status.demand_rps)
            if due is not None and due(name, snap.time):
                if fits >= self.max_fits_per_cycle:
                    kept = self.last.get(name)   # its last forecast, unless older than a forecast may be issued
                    if kept is not None and snap.time - kept.issued_at <= MAX_AGE_STEPS * self.online.step_s:
                        out[name] = kept
                    continue
                fits += 1
            try:
                out[name] = self.last[name] = self.online.forecast(name, snap.time, self.steps)
            except ValueError as exc:   # too little history, or stale demand (nothing was fitted)
                fits -= 1 if due is not None and due(name, snap.time) else 0
                self._refused(name, exc)
                continue
            if self.refused.pop(name, None) is not None:
                log.info("forecast for %s again: the capacity planner may lend its replicas", name)
        return out

    def _refused(self, name: str, exc: ValueError) -> None:
        """Log a refused forecast: a warning when it starts (or its reason changes), debug while it lasts."""
        why = "tide" if getattr(exc, "tide", False) else type(exc).__name__
        if self.refused.get(name) == why:
            log.debug("no forecast for %s: %s", name, exc)
            return
        self.refused[name] = why
        log.warning("no forecast for %s, the capacity planner holds its replicas: %s", name, exc)

    def rolling_error(self, service: str, horizon: str) -> float:
        return self.online.rolling_error(service, horizon)

    def fallbacks(self) -> dict[tuple[str, str], str]:
        """{(service, model): error} of the models persistence serves in place of now (see `online`), for the
        ``gputide_forecast_fallback`` gauge; {} from an online forecaster that does not say."""
        return self.online.fallbacks() if hasattr(self.online, "fallbacks") else {}

    def forecast_for(self, service: str, now: float, horizon: str) -> dict[float, float]:
        return self.online.forecast_for(service, now, horizon) if hasattr(self.online, "forecast_for") else {}


def _running_unread(snap: ClusterSnapshot, seen: Iterable[str]) -> list[str]:
    """The services of `seen` that `snap` shows no series of while a pod of theirs is placed on a GPU: a gap, not a
    service gone. Not one whose series go on elsewhere: read under namespace-qualified names (`*/name`:
    `serving.read_services`, a namesake in another namespace) or spread over two shards (`spread_services`, its status
    left out of a shard's snapshot). Kept, its unqualified model was never fed (a hole of unknown buckets) and had no
    forecast the cycle it came back; forgotten after the day, it is seeded again from its history then."""
    moved = {k.partition("/")[2] for k in (*snap.services, *snap.demand_unknown)}
    spread = getattr(snap, "spread_services", frozenset())   # duck-typed: one without the field spreads nothing
    return [n for n in seen if n not in snap.services and n not in moved and n not in spread and placed(snap, n)]


def horizon_label(seconds: float) -> str:
    """`3600` -> `1h`, `300` -> `5m`, `5400` -> `1h30m`: the `horizon` label of the forecast series, written as a
    Prometheus duration so a query can use it as is (`offset 1h30m`)."""
    left = max(int(round(seconds)), 0)
    parts = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts) or "0s"
