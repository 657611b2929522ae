"""A telemetry source whose Prometheus goes down after a given number of reads, for the loop's tests of cycles held
on their first read or on the fresh one before acting."""

from __future__ import annotations

from collections.abc import Callable

from balancer.errors import TelemetryUnavailable
from balancer.model import ClusterSnapshot


class ReadsDown:
    """Answers `make(now)` at the clock's time (`clock[0]`); `reads_left` reads more answer before Prometheus goes
    down (None: all), and `during_read()` runs inside each read (a read that takes long)."""

    def __init__(self, clock: list[float], make: Callable[[float], ClusterSnapshot]) -> None:
        self.clock, self.make = clock, make
        self.reads_left: int | None = None
        self.during_read: Callable[[], None] = lambda: None

    def snapshot(self) -> ClusterSnapshot:
        self.during_read()
        if self.reads_left is not None:
            if self.reads_left == 0:
                raise TelemetryUnavailable("prometheus down")
            self.reads_left -= 1
        return self.make(self.clock[0])
