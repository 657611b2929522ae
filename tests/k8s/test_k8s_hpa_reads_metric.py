"""Why the HPA reader's answer is unusable for loans, on the controller's registry (`gputide_hpa_reads_unusable`):
a None answer has every service lend nothing, and was only logged, so an operator whose loans stopped had no series
to see why."""

from __future__ import annotations

from balancer.actuate.k8s_hpa_reads import KubernetesHpaWants
from balancer.cmd._run_parts import hpa_source
from balancer.errors import ActuationError
from balancer.metrics import ControllerMetrics
from tests.k8s.test_k8s_hpa_reads import Clocks, Listed, hpa

UNUSABLE = ("unlisted", "stale", "odd")   # docs/metrics.md's reasons


class Failing(Listed):
    """Each list fails while `failing`, else answers the items."""

    failing = True

    def __call__(self, what: str, fn: object) -> dict:
        if self.failing:
            raise ActuationError("503")
        return super().__call__(what, fn)


def unusable(metrics: ControllerMetrics) -> dict[str, float | None]:
    return {r: metrics.registry.get_sample_value("gputide_hpa_reads_unusable", {"reason": r}) for r in UNUSABLE}


def only(reason: str) -> dict[str, float]:
    return {r: 1.0 if r == reason else 0.0 for r in UNUSABLE}


NONE = dict.fromkeys(UNUSABLE)   # no series


def test_each_reason_reads_1_while_it_holds_and_0_once_usable():
    clocks, listed, metrics = Clocks(), Failing(hpa(20)), ControllerMetrics()
    r = KubernetesHpaWants(None, ttl_s=5.0, clock=lambda: clocks.mono, wall=lambda: clocks.wall,
                           report=metrics.set_hpa_reads_unusable)
    r.api = listed
    assert unusable(metrics) == NONE   # before the first read: no series (a standby reads none)
    assert r() is None and unusable(metrics) == only("unlisted")   # the first list failed
    listed.failing = False
    clocks.advance(5.0)
    assert r() is not None and unusable(metrics) == only("")
    listed.failing = True
    clocks.advance(10.0)
    assert r() is not None and unusable(metrics) == only("")   # the last list kept while recent
    clocks.advance(10.0)
    assert r() is None and unusable(metrics) == only("stale")
    listed.failing, listed.items = False, [hpa(20), "junk"]
    clocks.advance(5.0)
    assert r() is None and unusable(metrics) == only("odd")
    listed.items = [hpa(20)]
    clocks.advance(5.0)
    assert r() is not None and unusable(metrics) == only("")


def test_a_leader_stepping_down_clears_it_and_run_passes_the_controllers_setter():
    """A standby reads no HPA, so a reason it kept from when it led (or one set at start) would say loans stop when the
    leader's go on (audit a3: "unlisted" 1 on every standby of the default two replicas). `hpa_source` (`gputide
    run`) hands the reader the controller's setter; without --services there is no reader and no series."""
    metrics = ControllerMetrics()
    r = hpa_source(object(), {"chat": object()}, 30.0, metrics.set_hpa_reads_unusable)
    r.api = Failing(hpa(20))
    assert r() is None and unusable(metrics) == only("unlisted")
    metrics.standby()
    assert unusable(metrics) == NONE
    assert hpa_source(object(), None, 30.0, metrics.set_hpa_reads_unusable) is None
    assert unusable(metrics) == NONE
