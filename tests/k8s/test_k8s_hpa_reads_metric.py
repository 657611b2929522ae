"""Why the HPA reader's answer is unusable for loans, on the controller's registry (`gputide_hpa_reads_unusable`):
a None answer has every service lend nothing, and was only logged, so an operator whose loans stopped had no series
to see why."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from balancer.actuate.k8s_hpa_reads import KubernetesHpaWants
from balancer.cmd._run_parts import hpa_source
from balancer.errors import ActuationError
from tests.k8s.test_k8s_hpa_reads import Clocks, Listed, hpa

UNUSABLE = ("unlisted", "stale", "odd")   # docs/metrics.md's reasons


class Failing(Listed):
    """Each list fails while `failing`, else answers the items."""

    failing = True

    def __call__(self, what: str, fn: object) -> dict:
        if self.failing:
            raise ActuationError("503")
        return super().__call__(what, fn)


def unusable(registry: CollectorRegistry) -> dict[str, float | None]:
    return {r: registry.get_sample_value("gputide_hpa_reads_unusable", {"reason": r}) for r in UNUSABLE}


def only(reason: str) -> dict[str, float]:
    return {r: 1.0 if r == reason else 0.0 for r in UNUSABLE}


def test_each_reason_reads_1_while_it_holds_and_0_once_usable():
    clocks, listed, registry = Clocks(), Failing(hpa(20)), CollectorRegistry()
    r = KubernetesHpaWants(None, ttl_s=5.0, clock=lambda: clocks.mono, wall=lambda: clocks.wall, registry=registry)
    r.api = listed
    assert unusable(registry) == only("unlisted")   # before the first call: nothing listed either
    assert r() is None and unusable(registry) == only("unlisted")   # the first list failed
    listed.failing = False
    clocks.advance(5.0)
    assert r() is not None and unusable(registry) == only("")
    listed.failing = True
    clocks.advance(10.0)
    assert r() is not None and unusable(registry) == only("")   # the last list kept while recent
    clocks.advance(10.0)
    assert r() is None and unusable(registry) == only("stale")
    listed.failing, listed.items = False, [hpa(20), "junk"]
    clocks.advance(5.0)
    assert r() is None and unusable(registry) == only("odd")
    listed.items = [hpa(20)]
    clocks.advance(5.0)
    assert r() is not None and unusable(registry) == only("")


def test_without_a_registry_it_is_set_on_one_of_its_own_and_run_passes_the_controllers():
    """Several readers without a registry (tests, other callers) do not clash; `hpa_source` (`gputide run`) serves it
    on the registry it is given, the controller's, as a family without series where it reads no HPA (the metrics
    contract: every documented series is served)."""
    clocks = Clocks()
    for _ in range(2):
        r = KubernetesHpaWants(None, ttl_s=5.0, clock=lambda: clocks.mono, wall=lambda: clocks.wall)
        r.api = Listed(hpa(20))
        assert r() is not None
        assert r.unusable.labels(reason="unlisted")._value.get() == 0
    registry = CollectorRegistry()
    assert hpa_source(object(), {"chat": object()}, 30.0, registry) is not None
    assert unusable(registry) == only("unlisted")
    registry = CollectorRegistry()   # no HPA read (no --services): the family served, without series
    assert hpa_source(object(), None, 30.0, registry) is None
    assert [f.samples for f in registry.collect() if f.name == "gputide_hpa_reads_unusable"] == [[]]
