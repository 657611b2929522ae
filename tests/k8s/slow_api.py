"""A slow API server on a fake monotonic clock, for the deadline tests (tests/k8s/test_k8s_action_deadline.py,
test_k8s_scheduler_deadline.py): the fake API server and the backoff advance the clock that `_Api.deadline`
reads, so minutes pass in milliseconds."""

from __future__ import annotations

import re

from fakeapi import FakeKube, status_body

from balancer.actuate.kubernetes import _Api


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SlowServer:
    """The fake API server made slow on `clock`: a request takes `seconds`, or what `slow` says for those whose method
    and path match; one that takes longer than the try's timeout (the client stopped waiting) is answered 504, though
    the server carries it out, as a real one may. `api`: the gateway whose tries it times (`timeouts`)."""

    def __init__(self, kube: FakeKube, api: _Api, clock: Clock, seconds: float,
                 slow: dict[tuple[str, str], float] | None = None) -> None:
        self.timeouts: list[float] = []   # of each try, as the gateway set it
        dispatch, try_timeout = kube.dispatch, api._try_timeout
        api._try_timeout = lambda what: self.timeouts.append(try_timeout(what)) or self.timeouts[-1]

        def timed(method: str, path: str, content_type, body):
            took = next((t for (m, p), t in (slow or {}).items() if m == method and re.search(p, path)), seconds)
            clock.advance(min(took, self.timeouts[-1]))
            answer = dispatch(method, path, content_type, body)
            return answer if took <= self.timeouts[-1] else (504, status_body(504, "Timeout", "no answer in time"))

        kube.dispatch = timed
