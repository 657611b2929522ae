"""Pods that no node of a node list could take even with every node empty, and why; model names no node has.

Such a pod fails at every arrival of every seed of the FGD replay whatever the policy, as Kubernetes leaves it
Pending (its node affinity or resource fit matches no node): a gpu_spec naming only models the node list lacks,
or more GPUs, CPU or memory than any node (of an allowed model) has. `gputide place` refuses a pod list in which
every GPU pod is such a pod, and names the others, so that a typo in a model name (`V100M61`) is not read as a
policy's result. Model names are matched exactly, as Kubernetes matches label values; a name that differs from
one of the node list's only in case or by a typo gets a 'did you mean' hint.

Pure: no I/O. The checks run once per distinct request (a trace has a few hundred among thousands of pods).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import numpy as np

from balancer.plan.placement.state import ClusterState, PodRequest, resolve_models


@dataclass(frozen=True)
class Unfit:
    """Pod `index` of the list fits no empty node: its `field` holds `value`, and `allowed` says what would fit."""

    index: int
    field: str
    value: object
    allowed: str
    hint: str = ""


def unplaceable(nodes: ClusterState, pods: list[PodRequest], where: str = "the node list") -> list[Unfit]:
    """Every pod of `pods` that no node of `nodes` could take even when empty, in list order."""
    seen: dict[tuple, tuple | None] = {}
    out = []
    for i, pod in enumerate(pods):
        key = (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.allowed_models)
        if key not in seen:
            seen[key] = _why(nodes, pod, where)
        if seen[key] is not None:
            out.append(Unfit(i, *seen[key]))
    return out


def _why(s: ClusterState, pod: PodRequest, where: str) -> tuple | None:
    """(field, value, allowed, hint) of the first request no empty node meets, or None when one node meets all."""
    fits = np.ones(s.n_nodes, dtype=bool)
    scope = ""
    if pod.num_gpu:
        fits = np.append(resolve_models(pod.allowed_models, s.models)[0], False)[s.model]
        if pod.allowed_models is not None:
            if not fits.any():
                spec = "|".join(pod.allowed_models)
                return "gpu_spec", spec, model_choice(s.models, where), hint(pod.allowed_models, s.models)
            scope = " of a model its gpu_spec allows"
    steps = (("num_gpu", pod.num_gpu, s.gpu_count, "GPUs"), ("cpu_milli", pod.cpu_milli, s.cpu_total, "CPU milli"),
             ("memory_mib", pod.memory_mib, s.mem_total, "memory MiB"))
    for field, need, have, what in steps:
        ok = fits & (have >= need)
        if not ok.any():
            most = int(have[fits].max()) if fits.any() else 0
            return field, need, f"at most {most}, the most {what} of a node of {where}{scope}", ""
        fits = ok
        if need and field == "num_gpu":
            scope += f" with {need} GPU{'s' if need > 1 else ''}"
        elif need and field == "cpu_milli":
            scope += (" and" if pod.num_gpu else " with") + f" {need} CPU milli"
    return None


def model_choice(models: tuple[str, ...], where: str) -> str:
    listed = ", ".join(models) if models else "none"
    return f"empty (any model) or models of {where} joined by '|' (it has {listed})"


def hint(names: tuple[str, ...] | None, models: tuple[str, ...]) -> str:
    """'did you mean ...' for the names that match no model but one closely (case, a typo); '' when none does."""
    folded = {m.casefold(): m for m in models}
    guesses = []
    for name in names or ():
        if name in models:
            continue
        close = folded.get(name.casefold()) or next(iter(difflib.get_close_matches(name, models, n=1)), None)
        if close is not None:
            guesses.append(f"{close} for {name}")
    return f"did you mean {', '.join(guesses)}? names match exactly" if guesses else ""


def unknown_models(pods: list[PodRequest], models: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """Each name a gpu_spec of a GPU pod holds that no node's model is: (pods naming it, index of the first)."""
    out: dict[str, tuple[int, int]] = {}
    for i, pod in enumerate(pods):
        if not pod.num_gpu:
            continue
        for name in pod.allowed_models or ():
            if name not in models:
                count, first = out.get(name, (0, i))
                out[name] = (count + 1, first)
    return out
