"""The exception tree, in one place.

    GputideError
    ├── InputError            bad user input (config, fleet spec, trace): names file, field, value, allowed; exit 2
    ├── TelemetryError        telemetry the controller must not act on (the loop holds still)
    │   ├── StaleTelemetry
    │   ├── MissingTelemetry
    │   ├── InvalidTelemetry  NaN, negative or impossible values
    │   └── TelemetryUnavailable  the source cannot be reached
    ├── SafetyViolation       an action refused by the safety chokepoint (balancer.safety has one subclass per limit)
    └── ActuationError
        ├── TemporaryActuationError  retry later (429, 409, 5xx, timeouts)
        └── PermanentActuationError  do not retry (404, 403, invalid)
"""

from __future__ import annotations

from typing import Any

EXIT_INPUT_ERROR = 2


def printable(text: str) -> str:
    """`text` with control characters escaped (`\\n`), so an error message stays on one line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def _one_line(text: str) -> str:
    """`text` with its runs of whitespace, newlines included, as single spaces."""
    return printable(" ".join(str(text).split()))


class GputideError(Exception):
    """Base of every error gputide raises on purpose."""


class InputError(GputideError):
    """Invalid user input. The message names the file, the field, the value and what is allowed."""

    def __init__(self, file: str | None, field: str, value: Any, allowed: str, detail: str = "") -> None:
        self.file = file
        # a field named by the input itself (an unknown YAML key) may hold a newline: shown escaped, on one line
        self.field = printable(str(field))
        self.value = value
        # one line whatever the parts hold: a pandas or OS message may end in a newline or span several
        self.allowed = _one_line(allowed)
        self.detail = _one_line(detail)
        where = f"{file}: " if file else ""
        extra = f" ({self.detail})" if self.detail else ""
        super().__init__(f"{where}field '{self.field}': invalid value {value!r}; allowed: {self.allowed}{extra}")


class TelemetryError(GputideError):
    """Telemetry the controller must not act on. `reason` is a short stable label for metrics."""

    reason = "telemetry"

    def __init__(self, message: str, *, subjects: tuple[str, ...] = ()) -> None:
        self.subjects = subjects
        super().__init__(message)


class StaleTelemetry(TelemetryError):
    reason = "stale_telemetry"


class MissingTelemetry(TelemetryError):
    reason = "missing_telemetry"


class InvalidTelemetry(TelemetryError):
    reason = "invalid_telemetry"


class TelemetryUnavailable(TelemetryError):
    reason = "telemetry_unavailable"


class SafetyViolation(GputideError):
    """An action refused by the safety chokepoint; `reason` labels gputide_actions_rejected_total."""

    reason = "safety"


class ActuationError(GputideError):
    """An actuator could not carry out an action."""


class TemporaryActuationError(ActuationError):
    """Worth retrying later: throttled (429), conflict (409), server error (5xx), timeout."""


class PermanentActuationError(ActuationError):
    """Not worth retrying: the target is gone, forbidden, or the request is invalid."""


EMPTY_ITEM = "an empty item (two commas in a row, or one at an end) is not allowed"


def items(text: str, flag: str, allowed: str) -> list[str]:
    """The items of a comma-separated flag, each stripped. None at all (`""`, `,`) is [], for the caller to refuse
    in its own words; an empty item among others (`1h,,2h`, a trailing comma) is an InputError naming the flag, the
    value and `allowed`: it was dropped without a word (`--stages live,,place` ran two stages)."""
    parts = [part.strip() for part in text.split(",")]
    if not any(parts):
        return []
    if not all(parts):
        raise InputError(None, flag, text, f"{allowed}; {EMPTY_ITEM}")
    return parts
