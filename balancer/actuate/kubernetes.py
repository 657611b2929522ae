"""The one gateway to the Kubernetes API: the only module in gputide that imports `kubernetes`.

It builds the client (`build_api_client`: in-cluster, a kubeconfig), wraps every call (`_Api`: retries with
exponential backoff on 5xx, throttling 429 and transport errors, optimistic-concurrency read-modify-write on 409
after a short jittered wait, `ApiException` mapped to gputide's `ActuationError` tree, every call of a piece of work
within its deadline: `k8s_budget`, the work's writes whose outcome is unknown listed: `writes()`), and holds what every
Kubernetes-facing module shares: the annotations, labels and taint gputide writes, RFC 3339 times (`k8s_time`).
Resource quantities and a pod's effective requests are `k8s_requests`. Built on it: the actuator
(`k8s_actuator.py`), Lease leader election (`k8s_leader.py`), the watch caches (`k8s_watch.py`), the pod and node
metadata (`k8s_workloads.py`, `k8s_nodes.py`) and the secondary scheduler (`k8s_scheduler.py`); none of them
imports the client.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch  # noqa: F401 - the gateway's watch, used by k8s_watch.ListWatch
from kubernetes.client.exceptions import ApiException

from balancer.actuate.k8s_budget import RESERVE_SHARE
from balancer.actuate.k8s_time import micro_time, parse_time, rfc3339  # noqa: F401  (re-exported: imported from here)
from balancer.errors import ActuationError, PermanentActuationError, TemporaryActuationError

log = logging.getLogger(__name__)

POWER_CAP_ANNOTATION = "gputide.io/power-caps"
HOT_TAINT_KEY = "gputide.io/hot"
HOT_UNTIL_ANNOTATION = "gputide.io/hot-until"
RESERVATION_ANNOTATION = "gputide.io/reserved-for"
GPU_RESOURCE = "nvidia.com/gpu"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SUSPENDED_LABEL = "gputide.io/suspended"  # on the Jobs gputide suspended (and only those: it resumes only them)
CHECKPOINT_ANNOTATION = "gputide.io/last-checkpoint"   # a training pod's last checkpoint (RFC 3339 or epoch s)
# on a training Job, when gputide last shrank, resumed or restarted it whole by a resize (RFC 3339): a Job whose
# trainer does not checkpoint on SIGTERM lost its work since its checkpoint then, so its work at risk counts from
# that time (`k8s_training`, `k8s_workloads`)
RESIZED_ANNOTATION = "gputide.io/resized-at"
PRIORITY_ANNOTATION = "gputide.io/priority"  # the suspended Job's pods' priority, for when it has none
KUEUE = ("kueue.x-k8s.io", "v1beta1", "clusterqueues")
KUEUE_WORKLOADS = ("kueue.x-k8s.io", "v1beta1")   # + namespace, "workloads": namespaced
MERGE_PATCH = "application/merge-patch+json"
Json = dict[str, Any]


# ---- errors: ApiException is mapped here, at the boundary ----------------------------------------------------


class KubeTemporaryError(TemporaryActuationError):
    # whether a try of the call before the one this error answers got no answer (`_Api.__call__`): the request may
    # have landed, and what this error says is then what it left (a 404: the object it deleted is gone; a 409: it
    # was created, or the pod it evicted is terminating or made again), which only the caller can judge
    after_unanswered = False

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class ConflictError(KubeTemporaryError):
    """409: stale resourceVersion or the object already exists."""


class ThrottledError(KubeTemporaryError):
    """429: API priority and fairness, or on an eviction a PodDisruptionBudget."""


class TooLargeVersionError(KubeTemporaryError):
    """504 "Too large resource version": a list asked for a state not older than a version the API server's watch
    cache did not reach within the server's own wait (~3 s). Not retried: the caller lists consistently at once
    (`k8s_watch.list_not_older`); each retry would hold a request for that wait again."""


class KubePermanentError(PermanentActuationError):
    after_unanswered = False   # as `KubeTemporaryError.after_unanswered`

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class NotFoundError(KubePermanentError):
    """404."""


class DeadlineExceeded(KubeTemporaryError):
    """The deadline of the work in progress (an action, a scheduler's pod) has passed, or would before another try
    could end: the call or retry was not started (`_Api.deadline`). Temporary: the work is tried again next time."""


def _translate(exc: ApiException, what: str) -> KubeTemporaryError | KubePermanentError:
    status = int(exc.status or 0)
    try:
        message = json.loads(exc.body or "{}").get("message", "") or exc.reason
    except (ValueError, AttributeError):
        message = exc.reason
    text = f"{what}: HTTP {status} {message}"
    if status == 409:
        return ConflictError(text, status)
    if status == 429:
        return ThrottledError(text, status)
    if status == 404:
        return NotFoundError(text, status)
    if status == 504 and "too large resource version" in message.lower():
        return TooLargeVersionError(text, status)
    if status in (0, 408) or status >= 500:
        return KubeTemporaryError(text, status)
    return KubePermanentError(text, status)


def _code(err: ActuationError) -> str:
    """A failed action's `ActionResult.code`: the HTTP status, "transport" when none came back, "deadline" when the
    action ran out of time, "refused" for the actuator's own refusal. `balancer.actuation_codes.CODES` lists the
    ones gputide_actuation_errors_total counts by name (any other status counts as `other`)."""
    if isinstance(err, DeadlineExceeded):
        return "deadline"
    status = int(getattr(err, "status", 0) or 0)
    return str(status) if status else ("transport" if isinstance(err, TemporaryActuationError) else "refused")


# ---- small pure helpers --------------------------------------------------------------------------------------


def controller_ref(meta: Json) -> Json | None:
    """An object's controlling ownerReference (`controller: true`: what recreates it), None for none."""
    return next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)


def split_name(qualified: str, default_namespace: str = "default") -> tuple[str, str]:
    """`"ns/name"` -> ("ns", "name"); a bare name lives in `default_namespace`."""
    ns, _, name = qualified.rpartition("/")
    return (ns or default_namespace), name


def _json_annotation(obj: Json, key: str) -> dict[str, Any]:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        log.warning("annotation %s is not JSON, ignoring it: %r", key, raw)
        return {}
    return value if isinstance(value, dict) else {}


def read_power_caps(node: Any, annotation: str = POWER_CAP_ANNOTATION) -> dict[str, float]:
    """The power caps {uuid: watts} gputide holds on a node (a dict as from the API or a V1Node): the GPUs it throttled
    and has not given back. Lenient, for the controller (`Node.power_caps`, `KubernetesActuator.power_caps`): entries
    that are not positive numbers, `{"restore": W}` give-backs included, are skipped (the power-cap agent reads the
    annotation strictly: `k8s_nodes.NodeAnnotationCaps`)."""
    if not isinstance(node, Mapping):
        node = {"metadata": {"annotations": getattr(getattr(node, "metadata", None), "annotations", None)}}
    caps = {}
    for uuid, watts in _json_annotation(dict(node), annotation).items():
        if isinstance(watts, int | float) and not isinstance(watts, bool) and watts > 0:
            caps[str(uuid)] = float(watts)
    return caps


# a read-modify-write that lost to another writer (409) waits before it reads again: CONFLICT_BACKOFF_S, doubled per
# conflict up to CONFLICT_BACKOFF_MAX_S, each wait jittered down by up to half (`_Api.update`). Short: the other writer
# is done in milliseconds; jittered: two controllers retrying in step would otherwise collide again on every try
CONFLICT_BACKOFF_S = 0.05
CONFLICT_BACKOFF_MAX_S = 0.4
MIN_TRY_S = 1.0   # no try is started with less of its deadline left: it would only add a call cut short (a write that
                  # may have landed all the same) to a deadline already passed


class _Deadline(threading.local):
    """The deadline of the work this thread is doing through one `_Api` (none: calls have their own timeouts only),
    and its writes of unknown outcome. Thread-local: a scheduler's watch threads list through the same `_Api` as
    its passes."""

    work: float | None = None    # the work's own calls and retries end by this
    hard: float | None = None    # those under `reserve()` by this
    reserving: int = 0           # how many `reserve()` blocks are open
    unknown: list[str] | None = None   # the work's writes of unknown outcome (`writes()`); None: not tracked


MUTATING = ("create_", "patch_", "replace_", "delete_")   # the generated client's writes (eviction, binding too)


def _settles(err: ActuationError | None) -> bool | None:
    """What one try of a write tells of its outcome: True, it may have landed unseen (no answer: a transport error,
    or the API server's own timeout, 504); False, a definite answer (success, or a 4xx that says why not: it also
    settles an earlier try's doubt, a 404 or 409 being what a landed earlier try leaves); None, neither (a 5xx,
    a 408 or 429: not done, but an earlier try may have been)."""
    status = int(getattr(err, "status", 0) or 0)
    if err is None or (400 <= status < 500 and status not in (408, 429)):
        return False
    return True if status in (0, 504) else None


def _never() -> bool:
    return False


def _marked(err: KubeTemporaryError | KubePermanentError, after_unanswered: bool
            ) -> KubeTemporaryError | KubePermanentError:
    """`err`, saying whether a try of its call before the one it answers got no answer (`after_unanswered`)."""
    err.after_unanswered = after_unanswered
    return err


class _Api:
    """Calls the generated client, returns parsed JSON, retries what is worth retrying, maps the rest; inside
    `deadline(s)`, every call and retry ends within it (`clock`: monotonic seconds, injectable). Once `stopping()`
    (its owner was told to stop: a scheduler's SIGTERM), a failed try is not retried (`__call__`)."""

    def __init__(self, api_client: k8s.ApiClient, max_retries: int, backoff_s: float,
                 sleep: Callable[[float], None], timeout_s: float, clock: Callable[[], float] = time.monotonic,
                 stopping: Callable[[], bool] = _never, jitter: Callable[[], float] = random.random) -> None:
        self.core = k8s.CoreV1Api(api_client)
        self.apps = k8s.AppsV1Api(api_client)
        self.autoscaling = k8s.AutoscalingV2Api(api_client)
        self.batch = k8s.BatchV1Api(api_client)
        self.coordination = k8s.CoordinationV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)
        self.policy = k8s.PolicyV1Api(api_client)
        self.storage = k8s.StorageV1Api(api_client)
        self.max_retries, self.backoff_s, self.sleep, self.timeout_s = max_retries, backoff_s, sleep, timeout_s
        self.clock, self.stopping = clock, stopping
        self.jitter = jitter   # uniform in [0, 1): how much of a conflict's wait is kept (`_conflict_wait`)
        self._deadline = _Deadline()

    # ---- deadlines: how long one piece of work may take, whatever the retries ----

    @contextmanager
    def deadline(self, seconds: float, reserve_s: float | None = None) -> Iterator[None]:
        """Every call this thread makes inside ends within `seconds` of now: the work's own calls and retries by
        `seconds - reserve_s` (default: all but the last `RESERVE_SHARE`), those under `reserve()` by `seconds`.
        Each try's timeout is cut to what is left, and a call or retry that would not have `MIN_TRY_S` raises
        `DeadlineExceeded` without being tried. Nested, the earlier end wins."""
        d, now = self._deadline, self.clock()
        saved = (d.work, d.hard)
        reserve = seconds * RESERVE_SHARE if reserve_s is None else reserve_s
        d.hard = now + seconds if d.hard is None else min(d.hard, now + seconds)
        d.work = min(d.hard, now + seconds - reserve, *(() if d.work is None else (d.work,)))
        try:
            yield
        finally:
            d.work, d.hard = saved

    @contextmanager
    def reserve(self) -> Iterator[None]:
        """Calls that undo or complete a change the work already made (a reservation released, Kueue quota given
        back) may use the reserve: the end of the deadline, which the work's own calls leave to them. Outside a
        deadline, nothing changes."""
        d = self._deadline
        saved = d.work
        d.work, d.reserving = d.hard, d.reserving + 1
        try:
            yield
        finally:
            d.work, d.reserving = saved, d.reserving - 1

    @contextmanager
    def writes(self, hand_up: bool = False) -> Iterator[list[str]]:
        """Inside, this thread's writes (`MUTATING`) whose outcome is unknown are tracked: a write whose last try got
        no answer (a transport error: the request may have been received; or a 504), or whose retries the deadline
        stopped after such a try, is listed by its `what` until a later try of the same call gets a definite answer
        (`_settles`; a 404 or 409 after no answer too: a caller to whom that means the write landed reads the
        error's `after_unanswered`). Yields the list, fresh for the block; nested, the inner block's writes are its
        own, and with `hand_up` those still listed when it ends (none its caller settled meanwhile) join the
        enclosing block's."""
        d = self._deadline
        saved, d.unknown = d.unknown, []
        try:
            yield d.unknown
        finally:
            inner, d.unknown = d.unknown, saved
            if hand_up and saved is not None:
                saved.extend(w for w in inner if w not in saved)

    @property
    def unknown_writes(self) -> list[str]:
        """The innermost `writes()` block's list, live (a caller that learns a write's outcome removes it)."""
        return self._deadline.unknown if self._deadline.unknown is not None else []

    def _track(self, written: str | None, err: ActuationError | None) -> None:
        """One try of the write `written` (None: not a write) ended with `err` (None: success)."""
        unknown, doubt = self._deadline.unknown, _settles(err)
        if written is not None and unknown is not None and doubt is not None:
            unknown[:] = [w for w in unknown if w != written] + ([written] if doubt else [])

    @property
    def reserving(self) -> bool:
        """Whether this thread's calls now run on the reserve (`reserve()`)."""
        return self._deadline.reserving > 0

    def _left(self) -> float | None:
        """Seconds left before this thread's current deadline (None: no deadline)."""
        until = self._deadline.work
        return None if until is None else until - self.clock()

    def _try_timeout(self, what: str) -> float:
        """The request timeout of the next try: the configured one, cut to what is left of the deadline."""
        left = self._left()
        if left is None:
            return self.timeout_s
        if left < MIN_TRY_S:
            raise DeadlineExceeded(f"{what}: not tried: {self._over(left)}")
        return min(self.timeout_s, left)

    def _over(self, left: float) -> str:
        part = "reserve" if self.reserving else "deadline"
        return f"only {left:.1f} s left before its {part}" if left > 0 else f"its {part} has passed"

    def _stopped(self, err: ActuationError, halt: Callable[[], bool] | None) -> bool:
        """Whether the failed try `err` is the last because the owner is `stopping()`, or the call's own `halt()` says
        so: a retry would only keep it from stopping (the caller sees the error it would see once out of retries).
        Not under `reserve()`: what completes or undoes a change already made keeps its retries, within the
        deadline."""
        if (self.stopping() or (halt is not None and halt())) and not self.reserving:
            log.info("%s; not retried: stopping", err)
            return True
        return False

    def __call__(self, what: str, fn: Callable[..., Any], *args: Any, retry_throttled: bool = True,
                 retries: int | None = None, halt: Callable[[], bool] | None = None, **kwargs: Any) -> Json:
        """`fn(*args, **kwargs)`'s answer as JSON. A temporary error (5xx, 429 unless not `retry_throttled`, no
        answer) is tried again up to `retries` (default `max_retries`) times after an exponential backoff; none is
        begun, nor its backoff slept, once `stopping()` or this call's `halt()` (`_stopped`: e.g. a binding once
        the Lease is lost) or when it could not end within the deadline.

        The error raised by a write says whether a try before the one it answers got no answer (`after_unanswered`;
        never for a read, which leaves nothing): a 404 or 409 is then what a landed earlier try may have left, not
        a definite refusal, for the caller to judge (`writes()` lists the write no longer: `_settles`)."""
        limit = self.max_retries if retries is None else retries
        written = what if getattr(fn, "__name__", "").startswith(MUTATING) else None   # tracked: `writes()`
        unanswered = False   # whether a try so far got no answer
        for attempt in range(limit + 1):
            try:
                timeout = self._try_timeout(what)
            except DeadlineExceeded as exc:   # not started (a retry: the clock moved during its backoff)
                exc.after_unanswered = unanswered and written is not None
                raise
            try:
                resp = fn(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
                data = resp.data
                self._track(written, None)
                return json.loads(data) if data else {}
            except ApiException as exc:
                err: KubeTemporaryError | KubePermanentError = _translate(exc, what)
                cause: Exception = exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:   # timeouts, refused connections
                err, cause = KubeTemporaryError(f"{what}: {type(exc).__name__}: {exc}"), exc
            err.after_unanswered = unanswered and written is not None   # a read that got no answer left nothing
            unanswered = unanswered or _settles(err) is True
            self._track(written, err)
            retryable = isinstance(err, KubeTemporaryError) and not isinstance(
                err, ConflictError | TooLargeVersionError) and (retry_throttled or not isinstance(err, ThrottledError))
            if not retryable or attempt == limit or self._stopped(err, halt):
                raise err from cause
            delay, left = self.backoff_s * 2**attempt, self._left()
            if left is not None and left - delay < MIN_TRY_S:   # the retry could not end in time: not started
                raise _marked(DeadlineExceeded(f"{err}; not retried: {self._over(left)}", err.status),
                              unanswered and written is not None) from cause
            log.info("%s; retry %d/%d", err, attempt + 1, limit)
            self.sleep(delay)
            if self._stopped(err, halt):   # told to stop (or to halt) during the backoff
                raise err from cause
        raise AssertionError("unreachable")

    def update(self, what: str, read: Callable[[], Json], patch: Callable[[Json], Json],
               change: Callable[[Json], Json | None]) -> Json | None:
        """Read-modify-write with resourceVersion; on 409 read again and recompute, up to max_retries times, each
        after a short jittered wait (`_conflict_wait`) so that two writers racing on one object do not collide again
        at once; the last 409 is raised without one.

        `change(obj)` returns a merge patch, or None when nothing needs changing."""
        for attempt in range(self.max_retries + 1):
            obj = read()
            body = change(obj)
            if body is None:
                return None
            body.setdefault("metadata", {})["resourceVersion"] = obj["metadata"]["resourceVersion"]
            try:
                return patch(body)
            except ConflictError:
                if attempt == self.max_retries:
                    raise
                log.info("%s: conflict, re-reading (%d/%d)", what, attempt + 1, self.max_retries)
                if wait := self._conflict_wait(attempt):
                    self.sleep(wait)
        return None

    def _conflict_wait(self, attempt: int) -> float:
        """The wait before reading again after conflict `attempt` (0 first): `CONFLICT_BACKOFF_S` doubled per
        conflict, at most `CONFLICT_BACKOFF_MAX_S`, of which the jitter keeps half to all; cut so that the next read
        still has `MIN_TRY_S` before the deadline (none left: no wait, that read raises `DeadlineExceeded`)."""
        full = min(CONFLICT_BACKOFF_S * 2**attempt, CONFLICT_BACKOFF_MAX_S)
        wait = full * (0.5 + 0.5 * self.jitter())
        left = self._left()
        return wait if left is None else max(min(wait, left - MIN_TRY_S), 0.0)

    def update_node(self, name: str, change: Callable[[Json], Json | None]) -> Json | None:
        what = f"node {name}"
        return self.update(
            what, lambda: self(what, self.core.read_node, name),
            lambda body: self(what, self.core.patch_node, name, body, _content_type=MERGE_PATCH), change)


def build_api_client(kubeconfig: str | None = None, in_cluster: bool | None = None,
                     context: str | None = None, host: str | None = None) -> k8s.ApiClient:
    """An ApiClient from the in-cluster service account, a kubeconfig (default: $KUBECONFIG, ~/.kube/config), or
    `host` alone: an API server URL and no credentials (the fake API server of the tests, the soak and the bench).

    `in_cluster=None` picks in-cluster config when running in a pod (KUBERNETES_SERVICE_HOST is set) and no
    kubeconfig was given.

    Its urllib3 retries are off (`retries = False`): left None, urllib3 tried a refused connection or a timed-out
    GET (or PUT) 3 more times inside one call, each with the whole request timeout, unseen by `_Api` (its retries,
    backoff, deadline and halt) and by the Lease elector's renew deadline: one unanswered GET cost 4 GETs and up to
    4 timeouts. Every caller retries on its own: `_Api` its `retries`, the elector on its retry period, a watch by
    listing again (`k8s_watch`). The tests and the bench build their clients here too (`host`), so they run what a
    deployment runs, not a copy of its settings that could drift."""
    cfg = k8s.Configuration()
    if host is not None:
        if kubeconfig is not None or in_cluster or context is not None:
            raise ValueError("build_api_client: host= takes no kubeconfig, in_cluster or context")
        cfg.host = host
    else:
        _load_config(cfg, kubeconfig, in_cluster, context)
    cfg.retries = False
    return k8s.ApiClient(cfg)


def _load_config(cfg: k8s.Configuration, kubeconfig: str | None, in_cluster: bool | None,
                 context: str | None) -> None:
    """Fills `cfg` from the in-cluster service account or a kubeconfig, as `build_api_client` picks."""
    if in_cluster is None:
        in_cluster = kubeconfig is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    try:
        if in_cluster:
            k8s_config.load_incluster_config(client_configuration=cfg)
        else:
            k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    except k8s_config.ConfigException as exc:
        raise PermanentActuationError(f"no Kubernetes API configuration: {exc}") from exc


__all__ = [
    "HOT_TAINT_KEY", "POWER_CAP_ANNOTATION", "RESERVATION_ANNOTATION", "ConflictError", "DeadlineExceeded",
    "NotFoundError", "ThrottledError", "build_api_client", "micro_time", "read_power_caps", "split_name",
]  # fmt: skip
