"""A write whose first try got no answer (it may have landed) and whose retry is then not tried, the deadline too near,
raises `DeadlineExceeded` saying a try before it got no answer (`after_unanswered`), whichever check stopped the
retry: the one before its backoff (the retry could not end in time) or `_Api._try_timeout` after it (the clock moved
further than the backoff during it: a sleep that overran, the thread descheduled; less than `MIN_TRY_S` left). A
caller judging the write by that error (a preemption's eviction, `Preemptor._ask`) would otherwise take it for a
write that was never sent. A read is never marked (it leaves nothing), nor a write whose first try is the one not
tried (no try before it). Only the check before the backoff had a test (test_k8s_unknown_outcome.py). The gateway
alone, on a fake monotonic clock."""

from __future__ import annotations

import pytest
import urllib3
from slow_api import Clock

from balancer.actuate.kubernetes import DeadlineExceeded, _Api


def reset() -> urllib3.exceptions.ProtocolError:
    """What urllib3 raises when the connection is reset while the answer is awaited: no answer."""
    return urllib3.exceptions.ProtocolError("Connection aborted.",
                                            ConnectionResetError(104, "Connection reset by peer"))


class NoAnswer:
    """A generated-client function named `name` whose every try takes `seconds` of the clock (no more than the try's
    timeout) and gets no answer; records each try's timeout."""

    def __init__(self, name: str, clock: Clock, seconds: float) -> None:
        self.__name__, self.clock, self.seconds = name, clock, seconds
        self.timeouts: list[float] = []

    def __call__(self, *args, _preload_content: bool, _request_timeout: float, **kwargs):
        self.timeouts.append(_request_timeout)
        self.clock.advance(min(self.seconds, _request_timeout))
        raise reset()


def gateway(clock: Clock, overrun_s: float) -> _Api:
    """The gateway (3 retries, backoff 0.5 s, 10 s tries) whose backoff sleeps `overrun_s` longer than asked."""
    return _Api(None, 3, 0.5, lambda s: clock.advance(s + overrun_s), 10.0, clock)


WRITE, READ = "create_namespaced_pod_eviction", "read_namespaced_pod"
# (deadline, seconds a try takes, backoff overrun): the retry not tried by the check before the backoff (1.2 s left
# after the first try, less its 0.5 s backoff than MIN_TRY_S), or by `_try_timeout` after it (6 s left, the backoff
# overran by 5 s: 0.5 s left)
BEFORE_BACKOFF, AFTER_BACKOFF = (11.2, 10.0, 0.0), (12.0, 6.0, 5.0)


@pytest.mark.parametrize(("name", "after"), [(WRITE, True), (READ, False)])
def test_a_retry_not_tried_after_its_backoff_overran_says_whether_a_write_got_no_answer_before(name, after):
    clock = Clock()
    deadline, seconds, overrun = AFTER_BACKOFF
    api, call = gateway(clock, overrun), NoAnswer(name, clock, seconds)
    with api.deadline(deadline, reserve_s=0.0), api.writes() as unknown, pytest.raises(DeadlineExceeded) as raised:
        api("pod default/v", call)
    assert call.timeouts == [10.0]                                     # the retry not tried
    assert str(raised.value) == "pod default/v: not tried: only 0.5 s left before its deadline"
    assert raised.value.after_unanswered is after
    assert unknown == (["pod default/v"] if after else [])      # the write's outcome unknown all the same


@pytest.mark.parametrize(("name", "after"), [(WRITE, True), (READ, False)])
def test_a_retry_not_tried_before_its_backoff_says_whether_a_write_got_no_answer_before(name, after):
    clock = Clock()
    deadline, seconds, overrun = BEFORE_BACKOFF
    api, call = gateway(clock, overrun), NoAnswer(name, clock, seconds)
    with api.deadline(deadline, reserve_s=0.0), api.writes(), pytest.raises(DeadlineExceeded) as raised:
        api("pod default/v", call)
    assert call.timeouts == [10.0] and "not retried" in str(raised.value)
    assert raised.value.after_unanswered is after


def test_a_write_whose_first_try_is_not_tried_is_not_marked():
    clock = Clock()
    api, call = gateway(clock, 0.0), NoAnswer(WRITE, clock, 10.0)
    with api.deadline(10.0, reserve_s=0.0):
        clock.advance(9.5)                                             # 0.5 s left: no try at all
        with api.writes() as unknown, pytest.raises(DeadlineExceeded) as raised:
            api("pod default/v", call)
    assert call.timeouts == [] and raised.value.after_unanswered is False and unknown == []
