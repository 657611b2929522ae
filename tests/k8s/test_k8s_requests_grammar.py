"""What gputide reads of a pod's resources is what kube-scheduler reads (balancer/actuate/k8s_requests.py,
k8s_reads.py):

* every form of apimachinery's resource.Quantity (<signedNumber><suffix>: decimal exponents "1e9"/"1E3", the P/E
  and Pi/Ei suffixes, n and u, ".5", "5.", a sign), exactly ("100m" three times is 300 milli-CPUs), and a refusal
  naming the pod, the field and the value only for what the API server refuses too;
* pod-level `spec.resources` (PodLevelResources, beta and on by default in Kubernetes 1.34): where set, the pod's
  requests for CPU, memory and hugepages, the containers' ignored (a pod with only pod-level requests counted as
  zero CPU and memory, and was packed onto nodes without room for it); with the init/sidecar rule and overhead;
* the host ports and hard topology spread constraints of a pending pod and the host ports of a bound one, read by
  `scheduling_request` and `pod_usage` themselves (the scheduler swapped its watches' converters to get them).
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from fakeapi import FakeKube, node, pod
from test_k8s_scheduler import most_free

from balancer.actuate.k8s_podaffinity import spread_constraints
from balancer.actuate.k8s_reads import pod_usage, scheduling_request
from balancer.actuate.k8s_requests import effective_requests, exact_quantity, pod_requests, quantity
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import KubePermanentError


@pytest.mark.parametrize(("text", "value"), [
    ("1e9", 10**9), ("1E3", 1000), ("12e+3", 12000), ("5e-1", Fraction(1, 2)), ("2P", 2 * 10**15),
    ("1E", 10**18), ("1Pi", 2**50), ("1Ei", 2**60), ("100m", Fraction(1, 10)), ("100n", Fraction(1, 10**7)),
    ("5u", Fraction(1, 200000)), (".5", Fraction(1, 2)), ("5.", 5), ("+1k", 1000), ("-1", -1), ("1.5Gi", 3 * 2**29),
    ("1e-12", Fraction(1, 10**9)),   # finer than a billionth: rounded up to one, as the API server rounds it
    ("100Ei", 2**63 - 1),             # capped, as the API server caps a binary quantity
    (" 8Gi ", 8 * 2**30), ("0", 0), (7, 7), (0.1, Fraction(1, 10)),
])
def test_every_form_of_a_kubernetes_quantity_is_read_exactly(text, value) -> None:
    assert exact_quantity(text) == value
    assert quantity(text) == float(value)


@pytest.mark.parametrize("text", ["", "1.5.3", "8GB", "1e", "12 Gi", "1K", "1Mi3", "abc", "1ee3", "1e3.5", "1e3m",
                                  "1e99999999999999999999", "Infinity", True])
def test_only_what_the_api_server_refuses_is_refused(text) -> None:
    with pytest.raises(KubePermanentError, match="invalid quantity"):
        exact_quantity(text)


def test_a_refused_quantity_names_the_pod_its_field_and_the_value() -> None:
    p = pod("odd")
    p["spec"]["initContainers"] = [{"name": "setup", "resources": {"limits": {"memory": "2 GB"}}}]
    with pytest.raises(KubePermanentError, match=r"^pod default/odd: spec\.initContainers\[0\]\.resources\.limits"
                                                 r"\.memory: invalid quantity '2 GB'"):
        effective_requests(p)


def with_requests(name: str, containers: list[dict], pod_level: dict | None = None, **spec) -> dict:
    p = pod(name, gpus=0, scheduler="gputide", phase="Pending")
    p["spec"]["containers"] = [{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)]
    if pod_level is not None:
        p["spec"]["resources"] = pod_level
    p["spec"].update(spec)
    return p


def test_milli_cpus_are_exact_and_memory_is_rounded_up() -> None:
    p = with_requests("p", [{"requests": {"cpu": "100m", "memory": "1300Ki"}}] * 3)   # 3 x 1.27 MiB
    assert pod_requests(p) == (0, 300, 4)   # 300 milli-CPUs exactly: never 301 (0.1 + 0.1 + 0.1 in floats, up)
    assert pod_requests(with_requests("q", [{"requests": {"memory": "1300Ki"}}]))[2] == 2   # 1.27 MiB: 2, never 1


def test_exponent_and_peta_quantities_are_counted() -> None:
    p = with_requests("p", [{"requests": {"cpu": "1.5E0", "memory": "1e9"}}])
    assert scheduling_request(p)["cpu_milli"] == 1500 and scheduling_request(p)["memory_mib"] == 954   # 953.67
    assert "volumes" not in scheduling_request(p)   # read, not held back


def test_pod_level_requests_are_the_pods_requests() -> None:
    only = with_requests("only", [{}, {}], {"requests": {"cpu": "4", "memory": "16Gi"}})
    assert pod_requests(only) == (0, 4000, 16384)   # it counted 0 CPU and 0 MiB
    # set for CPU only: the containers' memory still counts; pod-level requests stand for the containers' CPU
    mixed = with_requests("mixed", [{"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "2"}},
                                    {"requests": {"cpu": "1", "memory": "1Gi"}}], {"requests": {"cpu": "3"}})
    assert pod_requests(mixed) == (2, 3000, 2048)   # GPUs are never pod-level: the containers'


def test_a_pod_level_limit_without_requests_is_its_request_as_the_api_server_defaults_it() -> None:
    limited = with_requests("limited", [{}], {"limits": {"cpu": "2", "memory": "4Gi"}})
    assert pod_requests(limited) == (0, 2000, 4096)
    # a container asks for memory: the pod-level request is the containers' (the API server derives it so)
    asked = with_requests("asked", [{"requests": {"memory": "1Gi"}}], {"limits": {"cpu": "2", "memory": "4Gi"}})
    assert pod_requests(asked) == (0, 2000, 1024)


def test_pod_level_requests_stand_for_the_init_phase_too_and_overhead_comes_on_top() -> None:
    p = with_requests("p", [{"requests": {"cpu": "1"}}], {"requests": {"cpu": "2", "memory": "1Gi",
                                                                     "hugepages-2Mi": "64Mi"}},
                      initContainers=[{"name": "setup", "resources": {"requests": {"cpu": "6", "memory": "8Gi"}}}],
                      overhead={"cpu": "250m", "memory": "120Mi"})
    total = effective_requests(p)
    assert (total["cpu"], total["memory"], total["hugepages-2Mi"]) == (Fraction(9, 4), 1144 * 2**20, 64 * 2**20)
    assert scheduling_request(p)["extended"]["hugepages-2Mi"] == 64 * 2**20


@pytest.fixture
def pod_level_kube(kube: FakeKube, monkeypatch) -> FakeKube:
    """The fake API server, taking pods with `spec.resources` (its schema is Kubernetes 1.29's, which has none):
    the rest of such a pod is validated as before."""
    import fakeapi

    validate = fakeapi.validate

    def without_pod_level(obj: dict) -> None:
        if obj.get("kind") == "Pod" and "resources" in (obj.get("spec") or {}):
            obj = {**obj, "spec": {k: v for k, v in obj["spec"].items() if k != "resources"}}
        validate(obj)

    monkeypatch.setattr(fakeapi, "validate", without_pod_level)
    return kube


def test_the_scheduler_counts_pod_level_requests_of_pending_and_bound_pods(pod_level_kube: FakeKube, api,
                                                                           clock) -> None:
    kube = pod_level_kube
    kube.add(node("a", 8, cpu="8"))
    kube.add(node("b", 8, cpu="16"))
    bound = with_requests("bound", [{}], {"requests": {"cpu": "10"}})
    bound["spec"]["nodeName"], bound["status"]["phase"] = "b", "Running"
    kube.add(bound)
    kube.add(with_requests("big", [{"limits": {"nvidia.com/gpu": "1"}}], {"requests": {"cpu": "7", "memory": "1Gi"}}))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    # b has the most free GPUs, but the bound pod takes 10 of its 16 CPUs: 7 fit only on a (both read as 0 CPUs,
    # it went to b, where the kubelet refuses it)
    assert sched.schedule_once() == {"default/big": "a"}
    kube.add(with_requests("more", [{}], {"requests": {"cpu": "7"}}))   # a has 1 CPU left, b 6
    assert sched.schedule_once() == {"default/more": None}
    assert "Insufficient cpu" in sched.reasons["default/more"]


def with_port(p: dict, port: int) -> dict:
    p["spec"]["containers"][0]["ports"] = [{"containerPort": port, "hostPort": port}]
    return p


def test_host_ports_and_spread_are_read_by_k8s_reads_itself() -> None:
    constraint = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                  "labelSelector": {"matchLabels": {"app": "web"}}}
    p = with_port(pod("web-1", scheduler="gputide", phase="Pending", labels={"app": "web"}), 8080)
    p["spec"]["topologySpreadConstraints"] = [constraint]
    req = scheduling_request(p)
    assert req["host_ports"] == frozenset({("TCP", "0.0.0.0", 8080)})
    assert req["spread"] == spread_constraints({"app": "web"}, p["spec"]) and len(req["spread"]) == 1
    bound = with_port(pod("web-0", node_name="a"), 9090)
    assert pod_usage(bound).host_ports == frozenset({("TCP", "0.0.0.0", 9090)})
    plain = scheduling_request(pod("plain", scheduler="gputide", phase="Pending"))
    assert not plain["host_ports"] and not plain["spread"]


def test_a_bound_pod_whose_requests_cannot_be_read_takes_its_whole_node() -> None:
    odd = pod("odd", node_name="a")
    odd["spec"]["containers"][0]["resources"]["requests"]["memory"] = "8 GB"
    usage = pod_usage(odd)
    assert usage.gpus == usage.cpu_milli == usage.memory_mib == 2**40
