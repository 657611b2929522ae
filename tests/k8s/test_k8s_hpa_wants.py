"""What an HPA keeps on its own metrics, gputide's floor aside (balancer/actuate/k8s_hpa_wants.py): the HPA
controller's algorithm run on its status, per metric type, with its tolerance, its scale-down window, and never a
guess where a metric is missing. And which service each count belongs to (`serving.with_hpa_wants`)."""

from __future__ import annotations

from balancer.actuate.k8s_hpa_wants import History, hpa_wants, wants_by_target
from balancer.model import ServiceStatus, Workload, WorkloadClass
from balancer.telemetry.serving import with_hpa_wants

NOW = 1_700_000_000.0
LONG_AGO = "2023-11-14T20:00:00Z"   # two hours before NOW
WATCHED = History(since=NOW - 3600.0)   # watched a whole window, no recommendation seen higher than now's


def settled(h: dict) -> tuple[int | None, str]:
    """What it keeps once watched a whole window with nothing higher seen: its algorithm's answer now."""
    return hpa_wants(h, NOW, WATCHED)


def resource(name: str = "cpu", target: int = 80, current: int | None = None) -> tuple[dict, dict | None]:
    spec = {"type": "Resource", "resource": {"name": name, "target": {"type": "Utilization",
                                                                      "averageUtilization": target}}}
    status = None if current is None else {"type": "Resource", "resource": {
        "name": name, "current": {"averageUtilization": current, "averageValue": "1"}}}
    return spec, status


def pods(target: str, current: str) -> tuple[dict, dict]:
    metric = {"name": "vllm_queue", "selector": {"matchLabels": {"app": "vllm"}}}
    return ({"type": "Pods", "pods": {"metric": metric, "target": {"type": "AverageValue", "averageValue": target}}},
            {"type": "Pods", "pods": {"metric": metric, "current": {"averageValue": current}}})


def external(target: str, current: str) -> tuple[dict, dict]:
    metric = {"name": "queue_depth"}
    return ({"type": "External", "external": {"metric": metric, "target": {"type": "Value", "value": target}}},
            {"type": "External", "external": {"metric": metric, "current": {"value": current}}})


def hpa(*metrics: tuple[dict, dict | None], current: int = 8, lo: int = 1, hi: int = 20, last: str | None = LONG_AGO,
        down: dict | None = None, name: str = "vllm", target: str = "vllm", ns: str = "team-a",
        kind: str = "Deployment") -> dict:
    spec = {"scaleTargetRef": {"kind": kind, "name": target}, "minReplicas": lo, "maxReplicas": hi,
            "metrics": [m for m, _ in metrics]}
    if down is not None:
        spec["behavior"] = {"scaleDown": down}
    status = {"currentReplicas": current, "desiredReplicas": current,
              "currentMetrics": [s for _, s in metrics if s is not None]}
    if last:
        status["lastScaleTime"] = last
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec, "status": status}


def test_utilization_average_value_and_value_each_scale_by_their_ratio():
    assert settled(hpa(resource(current=40))) == (4, "")          # 8 x 40/80
    assert settled(hpa(resource(current=50))) == (5, "")          # 8 x 50/80 = 5
    assert settled(hpa(pods("10", "2500m"))) == (2, "")           # 8 x 2.5/10
    assert settled(hpa(pods("100m", "150m"))) == (12, "")         # up: 8 x 1.5
    assert settled(hpa(external("1k", "300"))) == (3, "")         # 8 x 0.3 = 2.4 -> 3
    # the highest over the metrics
    assert settled(hpa(resource(current=20), external("100", "75"))) == (6, "")


def test_within_the_tolerance_it_keeps_its_replicas():
    assert settled(hpa(resource(current=73)))[0] == 8       # 0.9125: within 10%
    assert settled(hpa(resource(current=71)))[0] == 8       # 0.8875: 7.1 -> 8
    assert settled(hpa(resource(current=64)))[0] == 7       # 0.8: 6.4 -> 7
    # a tolerance of its own (Kubernetes 1.33+, behavior.scaleDown.tolerance)
    assert settled(hpa(resource(current=64), down={"tolerance": "0.25"}))[0] == 8


def test_a_missing_or_unreadable_metric_keeps_its_replicas_and_says_so():
    n, why = settled(hpa(resource(current=20), (pods("10", "1")[0], None)))
    assert n == 8 and "Pods vllm_queue" in why and "missing or unreadable" in why
    spec, status = pods("10", "1")
    status["pods"]["current"]["averageValue"] = "lots"
    assert settled(hpa((spec, status)))[0] == 8
    # no scale-down on the others while one is unread; a scale-up still counts
    assert settled(hpa(resource(current=160), (pods("10", "1")[0], None)))[0] == 16
    # an HPA not yet synced: unknown, never guessed
    unsynced = hpa(resource(current=20))
    del unsynced["status"]
    assert settled(unsynced) == (None, "no status.currentReplicas")


def test_default_metric_is_cpu_at_80_percent():
    h = hpa((resource()[0], resource(current=40)[1]))
    h["spec"].pop("metrics")
    assert settled(h)[0] == 4


def test_the_window_keeps_the_highest_recommendation_seen_however_long_ago_it_last_scaled():
    """The controller keeps the highest recommendation of the window however long ago it last scaled (while
    gputide's floor binds it never does): the status shows none, so those the caller saw count (audit a7: timed from
    status.lastScaleTime, a loan made as demand fell counted replicas the HPA held for 300 s more)."""
    h = hpa(resource(current=20))   # 8 x 20/80 = 2 now; last scaled two hours ago
    n, why = hpa_wants(h, NOW, History(NOW - 3600, ((NOW - 240, 8), (NOW - 60, 5), (NOW, 2))))
    assert n == 8 and "scale-down window" in why   # 4 minutes ago its metrics asked for all 8
    seen = History(NOW - 3600, ((NOW - 400, 8), (NOW - 60, 5)))
    assert hpa_wants(h, NOW, seen) == (5, "the highest recommendation of its scale-down window")
    assert hpa_wants(hpa(resource(current=20), down={"stabilizationWindowSeconds": 30}), NOW, seen)[0] == 2
    # watched less than its window, or not at all: its replicas (those before are not known)
    assert hpa_wants(h, NOW, History(since=NOW - 200))[0] == 8
    assert hpa_wants(h, NOW)[0] == 8
    assert settled(hpa(resource(current=40), down={"selectPolicy": "Disabled"}))[0] == 8
    assert hpa_wants(hpa(resource(current=160)), NOW)[0] == 16   # a scale-up is never held


def test_a_scale_down_goes_no_further_than_its_policies_allow_in_one_period():
    """behavior.scaleDown.policies limit how far one period drops (audit a7: ignored, so 1 pod a minute lent 7)."""
    def down(*policies: tuple[str, int], select: str | None = None) -> tuple[int | None, str]:
        rules = {"policies": [{"type": t, "value": v, "periodSeconds": 60} for t, v in policies]}
        if select:
            rules["selectPolicy"] = select
        return settled(hpa(resource(current=20), current=10, down=rules))   # 10 x 20/80 = 2.5: 3

    n, why = down(("Pods", 1))
    assert n == 9 and "scale-down policies" in why
    assert down(("Percent", 15))[0] == 8                          # 10 x 0.85 = 8.5, truncated as the controller
    assert down(("Pods", 4), ("Percent", 50))[0] == 5             # Max (the default): the biggest change
    assert down(("Pods", 4), ("Percent", 50), select="Min")[0] == 6   # Min: the smallest
    assert down(("Percent", 100)) == (3, "")                      # the API's default: no limit
    assert down(("Pods", 9)) == (3, "")                           # a limit below the answer: the answer
    assert down(("Hours", 1))[0] == 10                            # a policy unread: its replicas


def test_a_policy_whose_period_holds_its_last_scale_allows_no_drop_from_its_replicas():
    """The controller counts a period from the replicas at its start, its scale-downs within it added back (audit a9:
    counted from currentReplicas, 1 pod per 600 s scaled 10 to 9 350 s ago lent an 8th it keeps for 250 s more)."""
    one = {"type": "Pods", "value": 1, "periodSeconds": 600}
    rules = {"stabilizationWindowSeconds": 0, "policies": [one]}
    n, why = settled(hpa(resource(current=20), current=9, last="2023-11-14T22:07:30Z", down=rules))   # NOW - 350 s
    assert n == 9 and "scale-down policies" in why
    assert settled(hpa(resource(current=20), current=9, last="2023-11-14T22:01:40Z", down=rules))[0] == 8   # - 700 s
    assert settled(hpa(resource(current=20), current=9, last=None, down=rules))[0] == 8   # never scaled
    # of several (Max, the default: the lowest), one whose period holds no scale counts from its replicas
    both = {"policies": [one, {"type": "Pods", "value": 2, "periodSeconds": 60}]}
    recent = "2023-11-14T22:07:30Z"
    assert settled(hpa(resource(current=20), current=9, last=recent, down=both))[0] == 7
    assert settled(hpa(resource(current=20), current=9, last=recent, down={**both, "selectPolicy": "Min"}))[0] == 9


def test_an_hpa_whose_last_scale_failed_to_write_tries_it_again():
    """AbleToScale False, FailedUpdateScale: the controller runs its algorithm again at each sync and writes what it
    asks (audit a9: read as its replicas, a scale-up from 4 to 10 counted 4, and a loan lent the 6 it takes back)."""
    conditions = [{"type": "AbleToScale", "status": "False", "reason": "FailedUpdateScale"},
                  {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"}]
    up = hpa(resource(current=200), current=4)   # 4 x 200/80 = 10
    up["status"]["conditions"] = conditions
    n, why = settled(up)
    assert n == 10 and "FailedUpdateScale" in why
    down = hpa(resource(current=20), current=4)
    down["status"]["conditions"] = conditions
    assert settled(down)[0] == 4   # a scale-down it failed to write: no fewer than its replicas


def odd_shapes() -> dict[str, tuple[dict, int | None]]:
    """HPA objects no API server serves, each with what it reads as (its replicas where readable)."""
    def shaped(change) -> dict:
        h = hpa(resource(current=20))
        change(h)
        return h

    return {
        "a metric None": (shaped(lambda h: h["spec"].__setitem__("metrics", [None])), 8),
        "a metric's type a list": (shaped(lambda h: h["spec"]["metrics"][0].__setitem__("type", ["x"])), 8),
        "scaleDown a list": (shaped(lambda h: h["spec"].__setitem__("behavior", {"scaleDown": ["x"]})), 8),
        "behavior a string": (shaped(lambda h: h["spec"].__setitem__("behavior", "x")), 8),
        "minReplicas None": (shaped(lambda h: h["spec"].__setitem__("minReplicas", None)), 8),
        "a target a string": (shaped(lambda h: h["spec"]["metrics"][0]["resource"].__setitem__("target", "x")), 8),
        "status a list": (shaped(lambda h: h.__setitem__("status", ["x"])), None),
    }


def test_an_hpa_of_an_odd_shape_is_unknown_and_raises_nothing():
    """A field of the wrong type raised, and the controller's whole cycle held fail-static (audit a9): such an HPA
    now reads as its replicas (None where those are unreadable too), and says why."""
    for name, (h, replicas) in odd_shapes().items():
        n, why = wants_by_target({"team-a/vllm": h}, NOW, {"team-a/vllm": WATCHED})["team-a/vllm"]
        assert (n, why.startswith("unreadable")) == (replicas, True), name


def test_which_condition_it_retries_is_decided_on_type_and_reason_not_on_the_note_s_wording(monkeypatch):
    """The retried scale (AbleToScale False, FailedUpdateScale) was found by comparing each condition's note text
    with a formatted constant: a note reworded alone read it as an HPA that cannot scale, its scale-up from 4 to 10
    counted 4. The pairs are compared; the wording is only said."""
    import balancer.actuate.k8s_hpa_wants as wants

    monkeypatch.setattr(wants, "_conditions", lambda stuck: "; ".join(f"{kind}={reason}" for kind, reason in stuck))
    up = hpa(resource(current=200), current=4)   # 4 x 200/80 = 10
    up["status"]["conditions"] = [{"type": "AbleToScale", "status": "False", "reason": "FailedUpdateScale"}]
    assert settled(up) == (10, "AbleToScale=FailedUpdateScale False, its last scale tried again: no fewer than its 4")
    up["status"]["conditions"][0]["reason"] = "FailedGetScale"
    assert settled(up) == (4, "it cannot scale, AbleToScale=FailedGetScale False: kept at its 4 replicas")


def test_an_hpa_that_cannot_scale_keeps_its_replicas():
    """AbleToScale or ScalingActive False: its status's readings are old or its scaling off; it keeps what runs."""
    h = hpa(resource(current=20), hi=6)   # its metrics (older) ask for 2, its maximum 6
    h["status"]["conditions"] = [{"type": "AbleToScale", "status": "False", "reason": "FailedGetScale"},
                                 {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"}]
    n, why = settled(h)
    assert n == 8 and "AbleToScale (FailedGetScale)" in why
    h["status"]["conditions"] = [{"type": "AbleToScale", "status": "True"},
                                 {"type": "ScalingActive", "status": "False", "reason": "FailedGetResourceMetric"}]
    assert settled(h)[0] == 8
    h["status"]["conditions"][1]["status"] = "True"
    assert settled(h) == (2, "")


def test_just_after_a_scale_its_new_pods_may_lack_readings_and_it_keeps_its_replicas():
    """The controller counts a running pod with no reading at 100% of its request on a scale-down, and the status
    says not how many report (audit a7: 5 of 10 new pods unscraped, 20% on the others: it keeps 8, we said 3). Pods
    lack readings mostly just after they start: within METRICS_GRACE_S of its last scale, its replicas."""
    n, why = settled(hpa(resource(current=20), current=10, last="2023-11-14T22:12:20Z"))   # NOW - 60 s
    assert n == 10 and "without readings" in why
    assert settled(hpa(resource(current=20), current=10, last="2023-11-14T22:09:20Z"))[0] == 10   # NOW - 240 s
    assert settled(hpa(resource(current=20), current=10, last="2023-11-14T22:08:20Z")) == (3, "")   # - 300 s
    assert settled(hpa(resource(current=160), last="2023-11-14T22:12:20Z"))[0] == 16   # a scale-up counts


def test_clamped_to_its_own_minimum_and_its_maximum():
    assert settled(hpa(resource(current=10), lo=3))[0] == 3
    assert settled(hpa(resource(current=400), hi=20))[0] == 20
    # gputide's floor (minReplicas 8, the operator's own 2 recorded) is no part of what it wants
    floored = hpa(resource(current=40), lo=8)
    floored["metadata"]["annotations"] = {"gputide.io/own-min-replicas": "2", "gputide.io/floor-min-replicas": "8"}
    assert settled(floored)[0] == 4


def test_wants_by_target_prefers_the_hpa_on_a_deployment():
    other = hpa(resource(current=80), name="a-rollout", kind="Rollout")
    mine = hpa(resource(current=40), name="b-deploy")
    both = {"team-a/a-rollout": other, "team-a/b-deploy": mine}
    assert wants_by_target(both, NOW, {"team-a/b-deploy": WATCHED}) == {"team-a/vllm": (4, "")}
    assert wants_by_target(both, NOW)["team-a/vllm"][0] == 8   # not watched: its replicas


def status(name: str, replicas: int = 8, namespace: str = "") -> ServiceStatus:
    return ServiceStatus(name=name, demand_rps=5.0, p99_latency_s=0.1, slo_latency_s=1.0, replicas=replicas,
                         namespace=namespace)


def test_each_service_gets_its_own_namespaces_hpa_and_unknown_is_its_replicas():
    pod = Workload(name="team-a/vllm-0", workload_class=WorkloadClass.INFERENCE, owner="vllm", namespace="team-a")
    services = {"vllm": status("vllm"), "team-b/vllm": status("team-b/vllm", 6), "chat": status("chat", 3),
                "lone": status("lone", 5, namespace="x")}
    wants = {"team-a/vllm": (4, ""), "team-b/vllm": (None, "no status.currentReplicas"), "y/lone": (1, "")}
    got = with_hpa_wants(services, (pod,), wants)
    assert got["vllm"].hpa_wants == 4            # its pods' namespace
    assert got["team-b/vllm"].hpa_wants == 6     # not synced: its replicas, nothing lent
    assert got["chat"].hpa_wants is None         # no HPA scales it
    assert got["lone"].hpa_wants is None         # an HPA of its name in another namespace is not its
    # the HPAs not read yet: every service lends nothing
    assert {s.hpa_wants for s in with_hpa_wants(services, (pod,), None).values()} == {8, 6, 3, 5}
