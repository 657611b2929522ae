"""Where each right holds, not only which: test_deploy_rbac.py compares (group, resource, verb) triples, whatever
the binding, so a right bound by a RoleBinding in gputide's namespace passed for code that lists across the cluster
(Kueue quota drift: every Workload and Job, `list_cluster_custom_object`, `list_job_for_all_namespaces`), reads or
evicts pods in their own namespaces (the scheduler's stuck victims), posts Events there (`PreemptionStuck`) or
reads a Node (cluster-scoped): all of them 403 at run time. Every request but the Lease's is made in namespaces
gputide does not know in advance, or across all of them, so it must be granted cluster-wide; the Lease (leader
election and the safety ledger) in gputide's own namespace only."""

from __future__ import annotations

import pytest
from api_calls import requests_of, requests_of_command
from test_deploy_manifests import OVERLAYS, render
from test_deploy_rbac import NAMESPACE, granted, needs

from balancer.actuate.k8s_deploy_record import RECORD_NAME

OWN_NAMESPACE = {("coordination.k8s.io", "leases"),   # the pod's own namespace: --lease-namespace=$(POD_NAMESPACE)
                 ("", "configmaps")}   # the record of the operator's Deployment counts (k8s_deploy_record)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_right_the_code_uses_across_namespaces_is_granted_cluster_wide(overlay):
    rights = granted(overlay)
    for sa, wanted in needs(overlay).items():
        for request in sorted(wanted):
            where = rights.get(sa, {}).get(request, set())
            expected = {NAMESPACE} if request[:2] in OWN_NAMESPACE else {"*"}
            assert expected <= where, f"{overlay}: {sa} holds {request} in {sorted(where)}, not {sorted(expected)}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_controller_reads_and_updates_no_configmap_but_its_record_of_deployment_counts(overlay):
    """The Role once granted get and update on every ConfigMap of gputide's namespace: the controller could rewrite
    the policy and services ConfigMaps it live-reloads. Both now name the record alone (resourceNames); create cannot
    be restricted by name, and creates only a ConfigMap that does not exist yet."""
    for role in (o for o in render(overlay) if o["kind"] in ("Role", "ClusterRole")):
        for rule in (r for r in role["rules"] if "configmaps" in r["resources"]):
            assert rule.get("resourceNames") == [RECORD_NAME] or rule["verbs"] == ["create"], (overlay, role, rule)


def test_the_code_reading_finds_todays_new_calls():
    """The calls added with Kueue quota drift correction, the stuck-preemption report and the Lease's safety ledger,
    each found where it is made and counted for the command that makes it."""
    controller, scheduler = requests_of_command("run"), requests_of_command("schedule")
    drift = {("kueue.x-k8s.io", "workloads", "list"), ("batch", "jobs", "list"),
             ("kueue.x-k8s.io", "clusterqueues", "get"), ("kueue.x-k8s.io", "clusterqueues", "patch")}
    assert drift <= requests_of("balancer.actuate.k8s_quota.KueueQuota") and drift <= controller
    assert requests_of("balancer.actuate.k8s_stuck._still_there") == {("", "pods", "get")}
    assert {("", "pods", "get"), ("", "events", "create")} <= scheduler   # victims read, PreemptionStuck posted
    ledger = {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}
    assert ledger == requests_of("balancer.actuate.k8s_leader.LeaseLeaderElector")
    assert ledger <= controller and ledger <= scheduler
    # the HPA floor, whatever the HPA scales: read, listed and patched (under field manager gputide); no other scale
    assert {("autoscaling", "horizontalpodautoscalers", v) for v in ("get", "list", "patch")} <= controller
    assert {r for r in controller if r[1].endswith("/scale")} == {("apps", "deployments/scale", "patch")}
    # the record of the operator's Deployment counts: read, created and updated (never patched, listed or watched)
    assert {r for r in controller if r[1] == "configmaps"} == {("", "configmaps", v) for v in ("get", "create",
                                                                                              "update")}
