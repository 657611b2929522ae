"""How long one action of the Kubernetes actuator (and one pod of the secondary scheduler) may take, and why that
is long enough.

Every action ends within its deadline (`ACTION_DEADLINE_S`; `gputide run --action-deadline`): the gateway cuts each
try's timeout to what is left of it and starts no call or retry that could not end in time, however many calls
the action's path makes and however they fail (`_Api.deadline` in balancer/actuate/kubernetes.py). The action's
own calls have the first part of it; the last `RESERVE_SHARE` is the reserve, kept for what undoes or completes a
change already made (`_Api.reserve`). The controller's grace period and liveness limit rest on that one figure
(balancer/app/health.py), not on retry arithmetic.

What this module keeps is why the deadline is not too short: the API calls on the longest path of each action
(`ACTION_API_CALLS`), and the most any path makes on the reserve (`RESERVE_API_CALLS`), each taking as long as a
slow but healthy API server may (`SLOW_CALL_S`), fit in it: all of them in the action's own part, those on the
reserve in the reserve (`least_action_deadline_s`). tests/k8s/test_k8s_action_budget.py walks every path with up
to three failed calls (refused, or a write unanswered) against the fake API server and checks each count is the
longest there is, so an action that gains calls fails there before a deadline can cut its healthy path short.
"""

from __future__ import annotations

ACTION_DEADLINE_S = 180.0   # the default: what `least_action_deadline_s` asks, rounded up to whole minutes
RESERVE_SHARE = 1 / 3       # the last third of a deadline is the reserve (`_Api.deadline`)

# A slow but healthy API server: the Kubernetes API call latency SLO (sig-scalability) has 99% of single-object
# calls within 1 s and of namespaced lists within 5 s; every call is taken at the lists' 5 s.
SLOW_CALL_S = 5.0

# API calls on the longest path of each action, its Event included. A read-modify-write is its read and its write:
# a 409 (another writer in between, or our own cut-short write that landed) reads and writes again, which these
# counts leave out (the deadline bounds those rounds too).
ACTION_API_CALLS = {
    # read the pod, its Job (a Job's pod: whether the eviction could fail it) and the target node, reserve the
    # target (read + patch), taint the source (read + patch), evict; the eviction unanswered (or 409): read the pod
    # again, and still running there, release the reservation (read + patch) (balancer/actuate/k8s_migrate.py)
    "migrate": 11,
    # resuming a Job gputide stopped, growing it with Kueue quota: read the Job, its Workloads (by label, then
    # by owner), both ClusterQueues; lend quota (both read again, lender and borrower read + patch); write the Job,
    # reactivate its Workload; that refused: restore the label, give the quota back (the queues read, lender and
    # borrower read + patch; the borrower's patch failed: the borrower fenced (noted void), read + patch; the lender
    # restored, read + patch) (k8s_training, k8s_quota)
    "scale_training": 24,
    "scale_inference": 4,   # list HPAs, the HPA's floor (read + patch), the Event
    "power_limit": 3,       # the node's annotation (read + patch), the Event
    "taint_node": 3,        # the node's taints (read + patch), the Event
}
# The most calls any path of each action makes on the reserve: undoing, completing, its Event.
RESERVE_API_CALLS = {
    # an unanswered eviction confirmed by a read of the pod, then the reservation released (read + patch); or that
    # read and the Event (the eviction landed)
    "migrate": 3,
    # a grow undone: the label restored, the quota given back (the queues read, lender and borrower read + patch,
    # the borrower's failed: fenced (noted void), read + patch; the lender restored, read + patch); a shrink's or a
    # stop's quota returned makes as many
    "scale_training": 11,
    "scale_inference": 1,   # the Event
    "power_limit": 1,
    "taint_node": 1,
}


def least_action_deadline_s() -> float:
    """The shortest deadline under which every action's longest path ends on a slow but healthy API server:
    `SLOW_CALL_S` a call, all its calls in the action's own part of the deadline, those on the reserve in the
    reserve."""
    return round(max(max(ACTION_API_CALLS.values()) * SLOW_CALL_S / (1 - RESERVE_SHARE),
                     max(RESERVE_API_CALLS.values()) * SLOW_CALL_S / RESERVE_SHARE), 3)


# The secondary scheduler's deadlines (balancer/actuate/k8s_scheduler.py), the same way. A pod's turn makes a handful
# of calls (its claims, the binding, a reservation, Events; a preemption one eviction and Event per victim): 60 s is
# sixty of them at the single-object latency SLO of a slow but healthy API server (1 s).
POD_DEADLINE_S = 60.0
# A pass's reads before its first pod, when no watch has synced (at start, or while one relists): up to seven lists
# (pending and bound pods, nodes, namespaces, claims, volumes, classes), the cluster-wide ones within the SLO's 30 s.
PASS_READS_DEADLINE_S = 120.0
