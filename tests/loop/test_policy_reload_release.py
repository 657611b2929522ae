"""`PolicyReloader(release=...)`: the floors of services gputide no longer manages (capacity shifting off, a service
taken out of --services' profiles) are given back at the first poll of every term, and again at every later poll
until `release()` succeeds; a failure is logged once per term. Before, only a namespace the policy protected had its
floors given back, so an HPA floored at 8 stayed at 8 for good once capacity shifting was off. And the part of
k8s_hpa that tells which recorded floors are no longer managed (`floored_namespaces`, `floor_managed`)."""

from __future__ import annotations

from test_policy_reload import write

from balancer.actuate.k8s_hpa import (
    HPA_FLOOR_ANNOTATION,
    HPA_OWN_MIN_ANNOTATION,
    floor_managed,
    floored_namespaces,
)
from balancer.app.policy_reload import PolicyReloader
from balancer.config import load


class Release:
    def __init__(self, results: list) -> None:
        self.results, self.calls = results, 0

    def __call__(self) -> bool:
        self.calls += 1
        result = self.results.pop(0) if self.results else True
        if isinstance(result, Exception):
            raise result
        return result


def reloader(tmp_path, release, office=None) -> PolicyReloader:
    path = tmp_path / "policy.yaml"
    write(path, "safety: {evictionBudget: 20}\n")
    return PolicyReloader(path, load(path), release=release, office=office)


def test_released_at_the_first_poll_and_not_again_once_done(tmp_path) -> None:
    release = Release([True])
    r = reloader(tmp_path, release)
    r.poll()
    r.poll()
    assert release.calls == 1


def test_tried_again_at_every_poll_until_done_and_warned_once(tmp_path, caplog) -> None:
    caplog.set_level("WARNING")
    release = Release([False, RuntimeError("API server 503"), False, True])
    r = reloader(tmp_path, release)
    for _ in range(6):
        r.poll()
    assert release.calls == 4
    assert sum("no longer manages" in m for m in caplog.messages) == 1


def test_a_standby_releases_nothing_until_it_takes_office_and_each_term_releases_once(tmp_path) -> None:
    release, term = Release([]), {"now": None}
    r = reloader(tmp_path, release, office=lambda: term["now"])
    r.poll()
    assert release.calls == 0
    term["now"] = 1
    r.poll()
    r.poll()
    assert release.calls == 1
    term["now"] = None   # lost the Lease, then took it again
    r.poll()
    term["now"] = 2
    r.poll()
    assert release.calls == 2


def hpa(ns: str, target: str, recorded: bool = True) -> dict:
    notes = {HPA_OWN_MIN_ANNOTATION: "3", HPA_FLOOR_ANNOTATION: "8"} if recorded else {}
    return {"metadata": {"name": target, "namespace": ns, "annotations": notes},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": target}, "minReplicas": 8, "maxReplicas": 10}}


def test_the_namespaces_with_recorded_floors_of_services_no_longer_managed() -> None:
    hpas = {"items": [hpa("serve", "web"), hpa("other", "web"), hpa("batch", "plain", recorded=False),
                      hpa("team", "chat")]}
    assert floored_namespaces(hpas) == ("other", "serve", "team")   # capacity shifting off: every recorded floor
    assert floored_namespaces(hpas, {"other/web": None, "chat": None}) == ("serve",)
    assert floored_namespaces(hpas, {"web", "team/chat"}) == ()
    assert floor_managed(hpa("serve", "web"), {"web"}) and not floor_managed(hpa("serve", "web"), {"other/web"})
