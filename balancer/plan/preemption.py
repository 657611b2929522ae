"""Preemption, as kube-scheduler's DefaultPreemption plugin decides it, over plain data: when a pending pod fits no
node, which pods of lower priority to evict, and on which node.

For each candidate node (the caller passes only nodes whose rules admit the pod and where it failed for want of
resources):

1. take away every pod of lower priority than the preemptor, and every pod terminating already (below); if the
   preemptor still does not fit, the node cannot help;
2. reprieve: put the removed pods back one at a time, those a PodDisruptionBudget protects first, then highest
   priority first, keeping each that leaves the preemptor fitting. What is not reprieved is the node's victims.

The node chosen is the first by, in order: the fewest victims whose eviction a PodDisruptionBudget does not allow,
the lowest highest victim priority, the lowest sum of victim priorities each offset by 2^31 (kube-scheduler's
MaxInt32 + 1, so that with negative priorities too more victims never weigh less), the fewest victims, and the latest
earliest start among the highest-priority victims (the least work lost), then by name. A pod of equal or higher priority
is never a victim.

A pod already terminating (`deletionTimestamp` set: its owner deleting it, or an earlier eviction) is never a victim:
it is going whatever is decided, and its room is counted as coming, whatever its priority. A node where that room
(with what is free) is enough needs no victim: the pod waits there for those pods (`Preemption.awaiting`) rather than
preempting more, there or elsewhere, as kube-scheduler's DefaultPreemption does not preempt again while a pod of lower
priority terminates on the node nominated for the preemptor (`PodEligibleToPreemptOthers`). Weighed as a victim,
it was the wrong way round: being more important than a running pod of lower priority, it was reprieved and that pod
evicted in its place; its node weighed its priority, so a node with a less important victim was preempted on though
its room was coming anyway; and, chosen, the eviction code found it terminating and only waited for it. Between nodes
otherwise equal, the one waiting for fewer terminating pods comes first (one that waits for none: the pod fits there
by what preemption weighs). Only a pod whose room is coming is to be passed as terminating: the caller leaves out one
stuck past its grace (a finalizer no one removes) or made again on its node (a DaemonSet's), whose room never comes
(`balancer.actuate.k8s_preempt.room_coming`): passed, it pinned the pod to its node for ever.

Resources are plain `{name: amount}` maps (`gpus`, `cpu_milli`, `memory_mib`, `pods`, any extended resource): a
pod fits when every amount it requests is free. A PodDisruptionBudget is a name and the disruptions it still
allows; each victim names the budgets its labels match.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Resources = Mapping[str, float]
UNLIMITED = 1 << 30   # a budget the caller does not know allows any disruption
OFFSET = 1 << 31      # added to each victim's priority in their sum (kube-scheduler's MaxInt32 + 1): never below 0


@dataclass(frozen=True, slots=True)
class Running:
    """A pod bound to a node, as preemption weighs it."""

    key: str                       # namespace/name
    priority: int
    requests: Resources
    started: float = 0.0           # start time (epoch seconds)
    budgets: tuple[str, ...] = ()  # the PodDisruptionBudgets that cover it
    terminating: bool = False      # being deleted already (`deletionTimestamp`): never a victim, its room coming


@dataclass(frozen=True, slots=True)
class Preemption:
    node: str
    victims: tuple[Running, ...]
    budget_violations: int
    # the pods terminating already there whose room the pod needs besides its victims' (`awaited`): what it waits for
    awaiting: tuple[Running, ...] = ()


def fits(need: Resources, free: Mapping[str, float]) -> bool:
    return all(free.get(k, 0.0) >= v for k, v in need.items() if v > 0)


def _take(free: dict[str, float], pod: Running, sign: float) -> None:
    for k, v in pod.requests.items():
        free[k] = free.get(k, 0.0) + sign * v


def victims_on(need: Resources, free: Resources, running: Sequence[Running], priority: int,
               allowed: Mapping[str, int]) -> tuple[tuple[Running, ...], int] | None:
    """(victims, how many of them a budget does not allow) for one node, or None when even evicting every pod of
    lower priority would not make room. `free` is what the node has free now; `allowed` the disruptions each
    budget still allows. A pod terminating already (`Running.terminating`) is none: its room is counted as coming
    (the victims are then only those needed besides it; none where it is enough: the pod waits for it)."""
    going = [p for p in running if p.terminating]
    lower = [p for p in running if p.priority < priority and not p.terminating]
    room = dict(free)
    for p in (*going, *lower):
        _take(room, p, +1)
    if not (lower or going) or not fits(need, room):
        return None
    ordered = sorted(lower, key=lambda p: (-p.priority, p.started))   # the most important first
    # would evicting p break a budget, were every pod before it evicted too? (kube-scheduler's grouping)
    broken = _breaks(ordered, allowed)
    violating = [p for p, b in zip(ordered, broken, strict=True) if b]
    ok = [p for p, b in zip(ordered, broken, strict=True) if not b]
    victims = []
    for p in (*violating, *ok):
        _take(room, p, -1)
        if fits(need, room):
            continue   # reprieved: it stays
        _take(room, p, +1)
        victims.append(p)
    # counted again over the victims alone: a reprieved pod uses none of its budgets' disruptions
    return tuple(victims), sum(_breaks(victims, allowed))


def awaited(need: Resources, free: Resources, running: Sequence[Running],
            victims: Sequence[Running]) -> tuple[Running, ...]:
    """The pods terminating already among `running` whose room `need` waits for once `victims` are gone: those
    releasing a resource that `free` and the victims' room leave short. Not every pod terminating on the node: one
    whose room the pod does not need is no reason it waits."""
    room = dict(free)
    for v in victims:
        _take(room, v, +1)
    short = {k for k, v in need.items() if v > 0 and room.get(k, 0.0) < v}
    return tuple(p for p in running if p.terminating and any(p.requests.get(k, 0.0) > 0 for k in short))


def _breaks(pods: Sequence[Running], allowed: Mapping[str, int]) -> list[bool]:
    """For each of `pods`, whether evicting it after those before it breaks a budget (`allowed`: the disruptions
    each budget still allows)."""
    left, out = dict(allowed), []
    for p in pods:
        out.append(any(left.get(b, UNLIMITED) <= 0 for b in p.budgets))
        for b in p.budgets:
            left[b] = left.get(b, UNLIMITED) - 1
    return out


def choose(need: Resources, priority: int, nodes: Mapping[str, tuple[Resources, Sequence[Running]]],
           allowed: Mapping[str, int] | None = None, *, respect_budgets: bool = False) -> Preemption | None:
    """The node to preempt on and its victims (see the module docstring), None when no node can make room.
    `nodes`: {node: (free resources, pods bound there)}. With `respect_budgets`, a node where room needs a
    disruption a budget does not allow is no candidate (kube-scheduler would still take it, last)."""
    best, best_key = None, None
    for name in sorted(nodes):
        free, running = nodes[name]
        found = victims_on(need, free, running, priority, allowed or {})
        if found is None:
            continue
        victims, bad = found
        if bad and respect_budgets:
            continue
        # no victim at all (the pod fits already, or once the pods terminating there are gone) comes first,
        # whatever the priorities are; of equals, the one waiting for the fewest terminating pods
        waits = awaited(need, free, running, victims)
        top = max((v.priority for v in victims), default=-OFFSET)
        earliest = min((v.started for v in victims if v.priority == top), default=0.0)
        key = (bad, top, sum(v.priority + OFFSET for v in victims), len(victims), -earliest, len(waits))
        if best_key is None or key < best_key:
            best, best_key = Preemption(name, victims, bad, waits), key
    return best
