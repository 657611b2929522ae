"""The HTTP side of reading Prometheus, below prometheus-api-client: the session the client is given, and PromQL
string quoting. No prometheus-api-client here (only `balancer.telemetry.prometheus` imports it).

* Retries (urllib3 `Retry`) with exponential backoff on 429 and 5xx, where a server's `Retry-After` is honoured
  up to `backoff_max` only: urllib3 slept whatever it said (a proxy answering 503 with `Retry-After: 3600` held
  the reconcile loop for 3 hours, far past its liveness limit).
* A 200 answer that carries `warnings` is refused (`PartialResponse`): Thanos Query's partial responses (a store
  down) and Prometheus's failed remote reads answer with some series missing and say so only there, and
  prometheus-api-client hands back the series alone. Warnings that only describe the query (`PromQL info: ...`)
  are let through.
* `promql_string` quotes a label value for a matcher, so a value holding a quote or backslash cannot break or
  change the query it goes into.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import requests
from urllib3.util.retry import Retry

# a warning about the query rather than the data (Prometheus 2.4x reported these among the warnings)
_INFO_PREFIX = "PromQL info:"
MAX_POINTS = 11_000   # Prometheus' limit on the points of one series in a range query (more: HTTP 400)
MOST_RANGE_S = 366 * 86400   # the longest range gputide asks for: a year (99999999w was asked and refused)
RETRY_STATUSES = (429, 500, 502, 503, 504)


class PartialResponse(requests.RequestException):
    """Prometheus (or Thanos, or a proxy) answered with warnings: the series may be incomplete."""

    def __init__(self, warnings: Sequence[str], **kwargs: object) -> None:
        self.warnings = tuple(warnings)
        shown = "; ".join(w[:300] for w in self.warnings[:3])
        super().__init__(f"answer with {len(self.warnings)} warning(s), a partial response: {shown}", **kwargs)


class CappedRetry(Retry):
    """`Retry` that waits at most `backoff_max` seconds whatever a `Retry-After` header asks for."""

    def get_retry_after(self, response):  # noqa: ANN001, ANN201 - urllib3's signature
        after = super().get_retry_after(response)
        return None if after is None else min(after, self.backoff_max)


def refuse_warnings(response: requests.Response, *args: object, **kwargs: object) -> requests.Response:
    """A `requests` response hook: raise `PartialResponse` for a 200 answer with warnings. The body is parsed a
    second time only when the key appears in it (an answer at 10,000 GPUs is 26 MiB)."""
    if response.status_code != 200 or b'"warnings"' not in response.content:
        return response
    try:
        body = json.loads(response.content)
    except ValueError:
        return response   # prometheus-api-client reports a body that is not JSON itself
    warnings = [str(w) for w in (body.get("warnings") or ()) if not str(w).startswith(_INFO_PREFIX)] \
        if isinstance(body, dict) else []
    if warnings:
        raise PartialResponse(warnings, response=response)
    return response


def session(*, retries: int, backoff_s: float, backoff_max_s: float = 10.0, ca_file: str | None = None,
            insecure_skip_verify: bool = False) -> tuple[requests.Session, Retry]:
    """A session for prometheus-api-client (which mounts the retry on it) and the retry to give it. TLS is
    verified against `ca_file` (else the system's CAs), or not at all with `insecure_skip_verify`: the client
    ignores its own `disable_ssl` once given a session, so that flag verified every certificate anyway."""
    s = requests.Session()
    s.verify = False if insecure_skip_verify else (ca_file or True)
    s.hooks["response"].append(refuse_warnings)
    retry = CappedRetry(total=retries, backoff_factor=backoff_s, backoff_max=backoff_max_s,
                        status_forcelist=RETRY_STATUSES, allowed_methods=frozenset({"GET", "POST"}))
    return s, retry


def promql_string(value: str) -> str:
    """`value` as a double-quoted PromQL string literal (backslash, quote and newline escaped)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'
