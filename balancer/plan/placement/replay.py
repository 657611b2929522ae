"""Replay of the FGD paper's arrival-only protocol on Alibaba v2023-format CSVs.

Protocol (Weng et al., ATC'23, and their simulator's `tune`/`seed` settings): the cluster is the node list
(the authors used `openb_node_list_gpu_node.csv`: 1,213 nodes, 6,212 GPUs); per seed the pod list is shuffled
and pods drawn with replacement are appended until the GPU requests reach `inflate` (1.3) x the cluster's GPU
capacity; pods arrive one by one and never leave; a pod that fits nowhere fails. After each arrival the GPU
allocation ratio (allocated milli-GPUs / capacity) is sampled; for every level k = 0..130 % of capacity the
value recorded is the one after the last pod whose cumulative GPU request is at most k %. Unallocated GPU % is
100 - allocation %. The target workload mix of the fragmentation score is the pod list itself.

CSV validation raises `InputError` naming the file, the column, the bad value and what is allowed.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from balancer.errors import InputError
from balancer.forecast.servegen import cell
from balancer.forecast.traces import booleans, check_header, read_rows
from balancer.plan.placement.fragmentation import WorkloadMix
from balancer.plan.placement.scheduler import Scheduler, get_policy
from balancer.plan.placement.state import MILLI, ClusterState, PodRequest, parse_gpu_spec
from balancer.plan.placement.unplaceable import Unfit, unplaceable

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
INT_CAP = 2**53  # largest integer a float64 CSV value holds exactly
NUMERIC_COLUMNS = frozenset({"cpu_milli", "memory_mib", "gpu", "num_gpu", "gpu_milli"})


def _read(path: str | Path, columns: tuple[str, ...]) -> pd.DataFrame:
    try:
        # `read_rows`, the trace readers' own: with a field more than the header on every row pandas took the first
        # column for the index and read each value under the next column's name; a row with a value past the
        # header, a trailing comma on some rows only, or a field past the csv module's limit in such a row is an
        # InputError naming its row (a trailing comma on every row is still fine)
        df = read_rows(str(path))
        with warnings.catch_warnings():   # the rows' lengths are checked above: a trailing comma's empty field
            warnings.simplefilter("ignore", pd.errors.ParserWarning)   # is one more field once '' is not NA
            text = pd.read_csv(path, dtype=str, keep_default_na=False, index_col=False)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        raise InputError(str(path), "path", str(path), "an existing, readable CSV file", str(exc)) from exc
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputError(str(path), "format", str(path), "a CSV file with a header row", str(exc)) from exc
    check_header(str(path))
    # names as written: inferred, a model `4090` read as 4090.0 (no node's model) and a node named NA as empty
    df = df.assign(**{c: text[c] for c in df.columns if c not in NUMERIC_COLUMNS})
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InputError(
            str(path), "columns", missing[0], ", ".join(columns), f"columns present: {list(df.columns)}"
        )
    if df.empty:
        raise InputError(str(path), "rows", 0, "at least one data row below the header")
    return df


def _ints(df: pd.DataFrame, column: str, path: str | Path, lo: int, hi: int | None = None) -> np.ndarray:
    values = pd.to_numeric(df[column], errors="coerce")
    boolean = booleans(df[column])
    bad = values.isna() | (values < lo) | (values != values.round()) | boolean
    # inf and 1e30 pass the checks above but wrap around when cast to int64: cap every column at 2**53
    bad |= values > (hi if hi is not None else INT_CAP)
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        allowed = f"integers {lo}..{hi}" if hi is not None else f"integers {lo}..{INT_CAP}"
        allowed = f"a number ({allowed}), not true/false" if boolean.iloc[row] else allowed
        raise InputError(str(path), column, cell(df[column], row), allowed, f"row {row + 2}")
    return values.to_numpy(dtype=np.int64)


def load_nodes(path: str | Path) -> ClusterState:
    df = _read(path, NODE_COLUMNS)
    gpus = _ints(df, "gpu", path, 0, 64)
    models = [None if pd.isna(m) else str(m).strip() or None for m in df["model"]]
    for i, (m, k) in enumerate(zip(models, gpus, strict=True)):
        if k > 0 and m is None:
            raise InputError(str(path), "model", "", "a GPU model name on nodes with gpu > 0", f"row {i + 2}")
        if m is not None and "|" in m:   # no pod could ask for it: a gpu_spec of T4|A10 allows T4 or A10
            raise InputError(str(path), "model", m, "a GPU model name without '|' ('|' separates the models a "
                             "pod's gpu_spec allows, so no pod could name this one)", f"row {i + 2}")
    return ClusterState.from_nodes(
        _ints(df, "cpu_milli", path, 0), _ints(df, "memory_mib", path, 0), gpus, models,
        names=_names(df, "sn", path),
    )  # fmt: skip


def _names(df: pd.DataFrame, column: str, path: str | Path) -> tuple[str, ...]:
    """A column of names, each non-empty and used once (a node's name is what a pod is bound to)."""
    raw = df[column]
    names = tuple("" if pd.isna(v) else str(v).strip() for v in raw)
    seen: set[str] = set()
    for i, name in enumerate(names):
        if not name or name in seen:
            raise InputError(str(path), column, "" if pd.isna(raw.iloc[i]) else raw.iloc[i],
                             "a non-empty name no earlier row has", f"row {i + 2}")
        seen.add(name)
    return names


def load_pods(path: str | Path) -> list[PodRequest]:
    df = _read(path, POD_COLUMNS)
    cpu, mem = _ints(df, "cpu_milli", path, 0), _ints(df, "memory_mib", path, 0)
    num, milli = _ints(df, "num_gpu", path, 0, 64), _ints(df, "gpu_milli", path, 0, MILLI)
    bad = np.flatnonzero(((num >= 1) & (milli == 0)) | ((num > 1) & (milli != MILLI)) | ((num == 0) & (milli > 0)))
    if len(bad):
        raise InputError(
            str(path), "gpu_milli", int(milli[bad[0]]),
            "0 when num_gpu is 0, 1..1000 when num_gpu is 1, 1000 when num_gpu > 1", f"row {bad[0] + 2}",
        )  # fmt: skip
    specs = _gpu_specs(df, path)
    names = df["name"].astype(str).tolist()
    return [
        PodRequest(int(c), int(m), int(g), int(gm), s, name=n)
        for c, m, g, gm, s, n in zip(cpu, mem, num, milli, specs, names, strict=True)
    ]


_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
SPEC_ALLOWED = "empty (any model) or GPU model names joined by '|', such as V100M16|V100M32"


def _gpu_specs(df: pd.DataFrame, path: str | Path) -> list[tuple[str, ...] | None]:
    """The gpu_spec column parsed; a cell that names no model (`|`) or a name no model has (`???`, `T4;A10`) is
    refused with its row: it read as 'any model' or as a model no node has, and the pod ran anywhere or nowhere."""
    if "gpu_spec" not in df.columns:
        return [None] * len(df)
    out = []
    for i, raw in enumerate(df["gpu_spec"]):
        text = "" if pd.isna(raw) else str(raw).strip()
        parts = [part.strip() for part in text.split("|") if part.strip()]
        if text and (not parts or not all(_MODEL_NAME.fullmatch(part) for part in parts)):
            raise InputError(str(path), "gpu_spec", raw, SPEC_ALLOWED, f"row {i + 2}")
        out.append(parse_gpu_spec(raw))
    return out


def check_replayable(nodes: ClusterState, pods: list[PodRequest], nodes_path: str, pods_path: str) -> list[Unfit]:
    """The FGD protocol measures GPU pods arriving up to `inflate` x GPU capacity: with no pod asking for a GPU, or
    none that any node could take even empty (a gpu_spec naming only models the node list lacks, more GPUs, CPU or
    memory than a node has), every level reads 100 % unallocated (or 0 % with nothing arrived) and describes the
    input files, not the policy. Returns the pods no node can take (`unplaceable`), which fail in every seed."""
    if nodes.total_gpu_milli == 0:
        raise InputError(nodes_path, "gpu", 0, "at least one node with gpu > 0")
    if not any(p.num_gpu > 0 for p in pods):
        raise InputError(pods_path, "num_gpu", 0, "at least one pod with num_gpu > 0")
    unfit = unplaceable(nodes, pods, nodes_path)
    gpu_unfit = [u for u in unfit if pods[u.index].num_gpu]
    if len(gpu_unfit) == sum(p.num_gpu > 0 for p in pods):
        u = gpu_unfit[0]
        why = (f"row {u.index + 2}", u.hint, "no GPU pod of the list fits any node, even an empty one")
        raise InputError(pods_path, u.field, u.value, u.allowed, "; ".join(w for w in why if w))
    return unfit


def arrival_order(pods: list[PodRequest], capacity_milli: int, inflate: float, seed: int) -> np.ndarray:
    """Indices into `pods`: a per-seed shuffle, then draws with replacement up to `inflate` x capacity."""
    rng = np.random.default_rng(seed)
    gpu = np.array([p.total_gpu_milli for p in pods], dtype=np.int64)
    order = rng.permutation(len(pods))
    target = inflate * capacity_milli
    if gpu.sum() <= 0:
        return order
    while gpu[order].sum() < target:
        extra = rng.integers(len(pods), size=max(len(pods) // 4, 16))
        order = np.concatenate([order, extra])
    cum = np.cumsum(gpu[order])
    return order[: int(np.searchsorted(cum, target)) + 1]


@dataclass
class ReplayResult:
    seed: int
    policy: str
    allocation_pct: np.ndarray  # [levels] GPU allocation ratio (%) at arrived level 0..max
    placed: int
    failed: int
    moves: int = 0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def unallocated_pct(self) -> np.ndarray:
        return 100.0 - self.allocation_pct


def replay(
    nodes: ClusterState,
    pods: list[PodRequest],
    policy: str,
    seed: int,
    inflate: float = 1.3,
    defragmenter=None,
) -> ReplayResult:
    """One seed of the FGD protocol on a copy of `nodes`. `defragmenter.try_fit` is asked when a pod fails."""
    import time

    started = time.perf_counter()
    pol = get_policy(policy)
    state = nodes.copy()
    capacity = state.total_gpu_milli
    mix = (
        WorkloadMix.from_pods(pods, include_cpu_only=pol.mix_cpu_only, **dict(pol.mix_options))
        if pol.needs_mix
        else None
    )
    sched = Scheduler(state, pol, mix, rng=np.random.default_rng(seed + 1_000_003))
    order = arrival_order(pods, capacity, inflate, seed)
    ledger = defragmenter.new_ledger(state) if defragmenter is not None else None
    allocated = np.zeros(len(order) + 1)
    arrived = np.zeros(len(order) + 1)
    placed = failed = 0
    alloc = 0
    for i, idx in enumerate(order):
        pod = pods[idx]
        placement = sched.schedule(pod)
        if placement is None and defragmenter is not None:
            placement = defragmenter.try_fit(sched, ledger, pod)
        if placement is None:
            failed += 1
        else:
            placed += 1
            alloc += pod.total_gpu_milli
            if ledger is not None:
                ledger.add(pod, placement)
        allocated[i + 1] = alloc
        arrived[i + 1] = arrived[i] + pod.total_gpu_milli
    levels = np.arange(int(round(inflate * 100)) + 1)
    last = np.searchsorted(arrived, levels / 100.0 * capacity + 1e-6, side="right") - 1
    pct = np.round(allocated[last] / max(capacity, 1) * 100.0, 4)
    moves = ledger.moves if ledger is not None else 0
    return ReplayResult(seed, policy, pct, placed, failed, moves, time.perf_counter() - started)


def fgd_seeds(count: int) -> list[int]:
    """The authors' seeds were 42..51; ours follow the same numbering."""
    return list(range(42, 42 + count))


def arrived_at(pods: list[PodRequest], order: np.ndarray, capacity_milli: int, level: float = 1.0) -> list[PodRequest]:
    """The pods of `order` that have arrived when the cumulative GPU request reaches `level` x capacity."""
    gpu = np.cumsum([pods[i].total_gpu_milli for i in order])
    return [pods[i] for i in order[: int(np.searchsorted(gpu, level * capacity_milli + 1e-6, side="right"))]]


def shared_gpu_floor(pods: list[PodRequest]) -> int:
    """Idle milli-GPUs that the GPU shares of `pods` leave however they are packed, if all of them run.

    A share above half a GPU (`gpu_milli` > 500) gets a GPU of its own, and the rest of that GPU (1000 - s)
    can only take shares that small: at 100 % arrival the default list's 810-milli pods leave 190 on each of
    their GPUs, and only the few pods of 190 or less can use it. The floor is the sum of those gaps less the
    most the smaller shares could put in them; for every threshold t, shares >= t only fit gaps >= t, so the
    fill is at most min over t of (gaps >= t) + (shares < t). It holds for any placement, with or without
    migrations, that runs every share above 500 (it is no bound for a policy that leaves such pods pending
    while room is free). The FGD protocol's unallocated GPU % at 100 % arrival cannot go below it then.
    """
    sizes = np.array([p.gpu_milli for p in pods if p.num_gpu == 1], dtype=np.int64)
    gaps = MILLI - sizes[sizes > MILLI // 2]
    small = np.sort(sizes[sizes <= MILLI // 2])
    if not len(gaps):
        return 0
    prefix = np.concatenate([[0], np.cumsum(small)])
    desc = np.sort(gaps)[::-1]
    gap_prefix = np.concatenate([[0], np.cumsum(desc)])
    thresholds = np.unique(np.concatenate([small, [MILLI + 1]]))
    small_below = prefix[np.searchsorted(small, thresholds, side="left")]
    gaps_at_least = gap_prefix[np.searchsorted(-desc, -thresholds, side="right")]
    fill = int((gaps_at_least + small_below).min())
    return max(int(gaps.sum()) - fill, 0)
