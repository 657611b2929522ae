"""Times as the Kubernetes API writes them: RFC 3339 strings (annotations, Event timestamps) and MicroTime
(Lease fields), both ways. Pure; re-exported by the gateway (`balancer.actuate.kubernetes`), where every
Kubernetes-facing module imports them from.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def micro_time(t: float) -> datetime:
    """An aware datetime for a MicroTime field. The client serialises with isoformat(), which drops the fraction
    when microsecond == 0, and the API server then rejects the value (RFC3339Micro needs six digits)."""
    dt = datetime.fromtimestamp(t, UTC)
    return dt if dt.microsecond else dt.replace(microsecond=1)


def parse_time(value: Any) -> float | None:
    """Epoch seconds of an RFC 3339 string or a datetime (None: empty or unreadable)."""
    if isinstance(value, datetime):
        return value.timestamp()
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
