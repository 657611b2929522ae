"""Preemption, as kube-scheduler's DefaultPreemption plugin decides it, over plain data: when a pending pod fits no
node, which pods of lower priority to evict, and on which node.

For each candidate node (the caller passes only nodes whose rules admit the pod and where it failed for want of
resources):

1. take away every pod of lower priority than the preemptor; if the preemptor still does not fit, the node
   cannot help;
2. reprieve: put the removed pods back one at a time, those a PodDisruptionBudget protects first, then highest
   priority first, keeping each that leaves the preemptor fitting. What is not reprieved is the node's victims.

The node chosen is the first by, in order: the fewest victims whose eviction a PodDisruptionBudget does not allow,
the lowest highest victim priority, the lowest sum of victim priorities each offset by 2^31 (kube-scheduler's
MaxInt32 + 1, so that with negative priorities too more victims never weigh less), the fewest victims, and the latest
earliest start among the highest-priority victims (the least work lost), then by name. A pod of equal or higher priority
is never a victim.

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


@dataclass(frozen=True, slots=True)
class Preemption:
    node: str
    victims: tuple[Running, ...]
    budget_violations: int


def fits(need: Resources, free: Mapping[str, float]) -> bool:
    return all(free.get(k, 0.0) >= v for k, v in need.items() if v > 0)


def _take(free: dict[str, float], pod: Running, sign: float) -> None:
    for k, v in pod.requests.items():
        free[k] = free.get(k, 0.0) + sign * v


def victims_on(need: Resources, free: Resources, running: Sequence[Running], priority: int,
               allowed: Mapping[str, int]) -> tuple[tuple[Running, ...], int] | None:
    """(victims, how many of them a budget does not allow) for one node, or None when even evicting every pod of
    lower priority would not make room. `free` is what the node has free now; `allowed` the disruptions each
    budget still allows."""
    lower = [p for p in running if p.priority < priority]
    room = dict(free)
    for p in lower:
        _take(room, p, +1)
    if not lower or not fits(need, room):
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
        # no victim at all (the pod fits already) comes first, whatever the priorities are
        top = max((v.priority for v in victims), default=-OFFSET)
        earliest = min((v.started for v in victims if v.priority == top), default=0.0)
        key = (bad, top, sum(v.priority + OFFSET for v in victims), len(victims), -earliest)
        if best_key is None or key < best_key:
            best, best_key = Preemption(name, victims, bad), key
    return best
