"""The secondary scheduler's filters: may a pending pod go to a node, and if not, why, in kube-scheduler's words.

Three parts, checked in this order for each node (kube-scheduler's order of its filter plugins):

* **placement rules** (`rule_refusal`): pod (anti-)affinity gputide cannot evaluate (a namespaceSelector while
  the namespaces' labels are not known) refuses the pod everywhere (with that reason, never placed against its
  rule); a cordoned node, unless the pod tolerates `node.kubernetes.io/unschedulable:NoSchedule` (as
  kube-scheduler's NodeUnschedulable filter: DaemonSet pods and drain-tolerant ones); then the pod's own rules
  (`balancer.noderules`: `NoSchedule`/`NoExecute` taints it does not tolerate, its node selector, its required
  node affinity), the same reading of Kubernetes the controller's migrations use; then where its volumes can be
  attached or provisioned (`k8s_volumes`: a bound volume's node affinity, a class's allowed topologies, the node
  a claim was already given);
* **what is left** (`resource_refusal`): the host ports the pod needs (kube-scheduler's NodePorts: the same
  protocol and port taken on the node, on the same address or every address), GPUs, CPU and memory, each less what
  is reserved for other pods (node annotation `gputide.io/reserved-for`: written by a Migrate for the workload's
  replacement, its GPUs only, and by this scheduler for a pod that preempts or starves, its GPUs, CPU and memory, its
  host ports and extended resources, and its priority: a hold for a pod of lower priority is not held against the pod,
  as kube-scheduler ignores lower-priority nominated pods, `counts_against`), every extended resource and the node's
  pod slots (less those held for other pods too); each only if the pod asks it (`short`: a 0-GPU pod is not refused
  a node whose GPUs are held for others, as kube-scheduler's NodeResourcesFit skips what a pod does not request);
* **where other pods run** (`k8s_podaffinity`): the pod's required pod affinity and anti-affinity, the
  required anti-affinity of the pods bound already, and the pod's hard topology spread constraints. These depend on
  the pass's bindings, so only `Offers` answers them (with the pass's `PodPlacement`); `why_not` does not.

`why_not(node, request)` is the first two for one node; `Offers` answers all three over every node of a pass at
once: the placement rules once per node for each distinct set of rules in the pass (a Job's pods share theirs),
what is left as a numpy column per resource compared with the pod's requests in one go, pod affinity per topology
domain, and `update(i, request)` reads node i again after a binding took its share and counts the pod bound there.
`unschedulable(why, request, offered)` is kube-scheduler's one-line summary for the pod's FailedScheduling Event:
`0/12 nodes are available: 4 Insufficient nvidia.com/gpu, ...`.

Nodes and requests are the plain dicts of `balancer.actuate.k8s_scheduler` (`node_facts` with what is free,
`scheduling_request`).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from typing import Any

import numpy as np

from balancer.actuate.k8s_podaffinity import REASONS, PodPlacement
from balancer.actuate.kubernetes import GPU_RESOURCE
from balancer.noderules import Taint

Json = dict[str, Any]


GPUS, CPU, MEMORY = "count", "cpu_milli", "memory_mib"   # what a reservation holds, by its keys
PRIORITY = "priority"   # a hold's field: the priority of the pod it holds the node for (`k8s_preempt.reserve`)
# a hold's fields: the host ports ([protocol, host IP, port]) and extended resources ({name: amount}) of its pod
HOST_PORTS, EXTENDED = "hostPorts", "extended"
LEFT = "victims"        # a preemption's hold field: the victims still to evict (all of them, until evicted)
EVICTED = "evicted"     # ... the victims evicted and still terminating: the hold is renewed while any is there
# a cordoned node admits the pods that tolerate this taint (kube-scheduler's NodeUnschedulable filter), whether or
# not the node lifecycle controller has put it on the node yet
CORDON = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


def _names(value: Any) -> bool:
    """Whether a hold's victim field is a list of pod names, as gputide writes it."""
    return isinstance(value, list) and all(isinstance(k, str) for k in value)


def well_formed(entry: Json) -> Json:
    """A hold as every reader reads it (`k8s_reads.node_facts` puts each through this as it parses the node, so
    the pass, the nodes' cache and its change handler, and `nodes_view` outside a pass all see the same): its
    victim fields (`LEFT`, `EVICTED`) that are not lists of pod names left out, as they name no victim. Such a field
    (a hold written by hand or by another tool, `"victims": 1`) must not stop the pass: the readers of the victims
    (those to evict, those leaving the node, `k8s_stuck`) would raise on it (6d96a2a). Its other fields are read
    leniently where they are read (`_held`, `_unranked`, `parse_time`), and a missing priority is no default's to
    fill: such a hold counts against every pod until `k8s_preempt.ranked` writes one. The annotation is not
    rewritten. `entry` itself when none is odd."""
    odd = [f for f in (LEFT, EVICTED) if f in entry and not _names(entry[f])]
    return {k: v for k, v in entry.items() if k not in odd} if odd else entry


def _held(entry: Json, what: str) -> int:
    """What one reservation holds of `what` (a key of `GPUS`, `CPU`, `MEMORY`): 0 when it does not say, as a
    migration's reservation does not say CPU or memory, or says it in a form that is not a number."""
    try:
        return max(int(entry.get(what) or 0), 0)
    except (TypeError, ValueError, AttributeError):
        return 0


def reserved(node: Json, what: str = GPUS) -> int:
    """GPUs (or, by `what`, CPU milli or memory MiB) reserved on `node` for anyone."""
    return sum(_held(v, what) for v in node["reservations"].values()) if node["reservations"] else 0


def usable_gpus(node: Json) -> int:
    """A node's `gpus_usable`, what the placement policy is told it has: its free GPUs less the reservations held
    against every pod (`counts_against`: those that do not say their pod's priority). A hold that says its pod's
    priority is left to the filters, which weigh it pod by pod: the nodes a pod is offered have room for it after
    the holds that count against it, while a more important pod may use what the hold keeps (the policy, asked
    once per pass with one value per node, would otherwise refuse it the room the filters gave it)."""
    if not node["reservations"]:
        return node["gpus_free"]
    return node["gpus_free"] - sum(_held(v, GPUS) for v in node["reservations"].values() if _unranked(v))


def counts_against(entry: Json, req: Json) -> bool:
    """Whether a reservation of another pod's holds what it holds against `req`: as kube-scheduler weighs the pods
    nominated to a node, only one for a pod of equal or higher priority does (a lower-priority pod's hold, after
    its preemption or while it starves, takes nothing from a more important one, and is no reason to preempt).
    One that does not say its priority as an integer counts against every pod: a Migrate's (keyed by the
    workload, whose replacement pod does not exist yet) and one written by a gputide that did not record it, whose
    pod may be of any priority. This gputide writes none and renews none: each lasts until its `expires`, a
    Migrate's `reservation_ttl_s` or its pod's grace period and a minute (`k8s_migrate.hold_s`, past the hour for
    a pod whose grace period is), an older gputide's starving hold its `reserve_s`, and an older preemption's at
    most `k8s_preempt.MAX_HOLD_S` from its start, its priority written by the first pass that carries it on
    (`k8s_preempt.ranked`), before any renewal."""
    if _unranked(entry) or not isinstance(req.get("priority"), int):
        return True
    return entry[PRIORITY] >= req["priority"]


def _unranked(entry: Json) -> bool:
    """Whether a reservation does not say its pod's priority as an integer (it then counts against every pod)."""
    priority = entry.get(PRIORITY)
    return isinstance(priority, bool) or not isinstance(priority, int)


def reserved_for_others(node: Json, req: Json, what: str = GPUS) -> int:
    """GPUs (or, by `what`, CPU milli or memory MiB) reserved on `node` for anyone but `req` that counts against it
    (`counts_against`: its own reservations are not held against it, nor those of pods of lower priority)."""
    return sum(_held(v, what) for v in _counted(node, req))


def _counted(node: Json, req: Json) -> list[Json]:
    """The reservations on `node` held against `req` (`reserved_for_others`)."""
    return [v for k, v in node["reservations"].items() if k not in req["owned"] and counts_against(v, req)] \
        if node["reservations"] else []


def ports_reserved_for_others(node: Json, req: Json) -> frozenset[tuple]:
    """The host ports ((protocol, host IP, port)) held on `node` for pods other than `req` that count against it:
    a preemptor's or a starving pod's (`k8s_preempt.reserve`), so that no pod takes the port it waits for. A hold
    that does not list them (a Migrate's, an older gputide's), or lists one in another form, holds none of them."""
    held = set()
    for entry in _counted(node, req):
        value = entry.get(HOST_PORTS)
        for p in value if isinstance(value, list) else ():
            if isinstance(p, list) and len(p) == 3 and isinstance(p[0], str) and isinstance(p[1], str) \
                    and isinstance(p[2], int) and not isinstance(p[2], bool):
                held.add(tuple(p))
    return frozenset(held)


def unlisted_amount(resource: str) -> float:
    """What a node that does not list the extended resource `resource` has of it: none, except pod slots, where a
    node that does not count its pods takes any number (the filters, `Offers` and preemption read it alike)."""
    return math.inf if resource == "pods" else 0.0


def extended_reserved_for_others(node: Json, req: Json, resource: str) -> float:
    """How much of the extended resource `resource` is held on `node` for pods other than `req` that count against
    it (0 where a hold does not say, or says it in a form that is not an amount: `_amount`)."""
    total = 0.0
    for entry in _counted(node, req):
        value = entry.get(EXTENDED)
        total += _amount(value.get(resource)) if isinstance(value, dict) else 0.0
    return total


def others_held(node: Json, req: Json) -> tuple[int, int, int, dict[str, float]]:
    """(GPUs, CPU milli, memory MiB, {each extended resource `req` asks: amount}) held on `node` for pods other than
    `req` that count against it: `reserved_for_others` and `extended_reserved_for_others` of each, in one walk over
    the node's holds rather than one per resource (`k8s_preempt.closest_to_fitting` weighs every node so)."""
    gpus = cpu = memory = 0
    extended = dict.fromkeys(req["extended"], 0.0)
    for entry in _counted(node, req):
        gpus, cpu, memory = gpus + _held(entry, GPUS), cpu + _held(entry, CPU), memory + _held(entry, MEMORY)
        value = entry.get(EXTENDED)
        for k, v in value.items() if isinstance(value, dict) else ():
            if k in extended:
                extended[k] += _amount(v)
    return gpus, cpu, memory, extended


def _amount(value: Any) -> float:
    """An amount of a hold's `EXTENDED` map as `k8s_preempt.reserve` writes it: a finite number, not negative, not a
    bool. Anything else (written by hand or another tool) holds nothing: NaN added to the others' made their total
    NaN, which no comparison refuses (the others' holds erased), Infinity held all of it, `true` one, "1" one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    try:
        amount = float(value)
    except OverflowError:   # an integer past any float: no amount either
        return 0.0
    return amount if math.isfinite(amount) and amount >= 0 else 0.0


def _discounted(node: Json, req: Json) -> bool:
    """Whether `node` holds a reservation that does not count against `req`: its own, or a lower-priority pod's."""
    return any(k in req["owned"] or not counts_against(v, req) for k, v in node["reservations"].items())


def reservation_key(node: Json, req: Json) -> str | None:
    """The key of `req`'s own reservation on `node`, if it has one."""
    return next((k for k in node["reservations"] if k in req["owned"]), None) if node["reservations"] else None


PORTS = "node(s) didn't have free ports for the requested pod ports"
ANY_IP = "0.0.0.0"


def port_conflict(taken: Any, wanted: Any) -> bool:
    """Whether one of the host ports `wanted` ((protocol, host IP, port)) is `taken` on the node, as kube-scheduler's
    NodePorts filter (HostPortInfo.CheckConflict) and the kubelet judge it: the same protocol and port, on the same
    address or where either side takes every address ("0.0.0.0")."""
    if not taken or not wanted:
        return False
    return any((proto, ip, port) in taken or (proto, ANY_IP, port) in taken
               or (ip == ANY_IP and any(t[0] == proto and t[2] == port for t in taken)) for proto, ip, port in wanted)


def take(node: Json, req: Json) -> str | None:
    """Count `req` on `node` (a binding made, or tried on a copy): what it takes comes off what is free, and its
    own reservation there, if any, is used up. Returns that reservation's key (None: it had none)."""
    if req.get("host_ports"):
        node["host_ports"] = frozenset(node.get("host_ports") or ()) | req["host_ports"]
    node["gpus_free"] -= req["num_gpu"]
    node["cpu_milli_free"] -= req["cpu_milli"]
    node["memory_mib_free"] -= req["memory_mib"]
    for k, v in req["extended"].items():
        if k in node["extended_free"]:
            node["extended_free"][k] -= v
    key = reservation_key(node, req)
    if key is not None:
        node["reservations"].pop(key)
    node["gpus_usable"] = usable_gpus(node)
    return key


def unsupported(req: Json) -> str:
    """What of the pod's placement rules gputide cannot evaluate ("": nothing)."""
    affinity = req["pod_affinity"]
    return affinity.unsupported if affinity else ""


def rule_refusal(node: Json, req: Json) -> str | None:
    """The pod's and the node's placement rules: unsupported pod affinity, cordon, taints, node selector, node
    affinity, volumes."""
    if unsupported(req):   # never ignored silently: placed against it, the pod would break its rule
        return f"node(s) not considered: gputide cannot evaluate {unsupported(req)}"
    rules = req["rules"]
    if node["unschedulable"] and not rules.tolerates(CORDON):   # kube-scheduler's NodeUnschedulable filter
        return "node(s) were unschedulable"
    taint = rules.untolerated(node["taints"])
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
    if not rules.selector_matches(node["labels"]):
        return "node(s) didn't match Pod's node selector"
    if not rules.affinity_allows(node["name"], node["labels"]):
        return "node(s) didn't match Pod's node affinity"
    volumes = req.get("volumes")
    return volumes.refusal(node["name"], node["labels"]) if volumes and volumes.rule else None


RESERVED_GPUS = "node(s) had GPUs reserved for other pods"
RESERVED_CPU = "node(s) had cpu reserved for other pods"
RESERVED_MEMORY = "node(s) had memory reserved for other pods"
RESERVED_PORTS = "node(s) had the requested pod ports reserved for other pods"


def reserved_words(resource: str) -> str:
    """Why a node whose `resource` (an extended resource, pod slots) is held for other pods refuses a pod."""
    return f"node(s) had {'pod slots' if resource == 'pods' else resource} reserved for other pods"


def port_refusal(node: Json, req: Json) -> str | None:
    """Why `node` refuses `req` a host port it needs: taken there, or held there for another pod that counts against
    it; None when neither. A node refused so is not admitted for preemption or a hold (`Offers.fitting`)."""
    if port_conflict(node.get("host_ports"), req.get("host_ports")):
        return PORTS
    if req.get("host_ports") and port_conflict(ports_reserved_for_others(node, req), req["host_ports"]):
        return RESERVED_PORTS
    return None


def short(have: Any, want: Any) -> Any:
    """Whether `have` (a node's amount, or a numpy column of them) is less than `want`, for a resource the pod asks:
    one it asks none of never refuses a node, as kube-scheduler's NodeResourcesFit skips it. A 0-GPU pod was refused
    a node whose GPUs were held for others past what is free there (free less held below 0), though it needs none."""
    return (have < want) & (want > 0)


def resource_refusal(node: Json, req: Json) -> str | None:
    """What the node has left: the host ports the pod needs, GPUs (less those reserved for other pods), CPU,
    memory, the rest, pod slots; only those the pod asks (`short`)."""
    if why := port_refusal(node, req):
        return why
    if short(node["gpus_free"], req["num_gpu"]):
        return f"Insufficient {GPU_RESOURCE}"
    if short(node["gpus_free"] - reserved_for_others(node, req), req["num_gpu"]):
        return RESERVED_GPUS
    if short(node["cpu_milli_free"], req["cpu_milli"]):
        return "Insufficient cpu"
    if short(node["cpu_milli_free"] - reserved_for_others(node, req, CPU), req["cpu_milli"]):
        return RESERVED_CPU
    if short(node["memory_mib_free"], req["memory_mib"]):
        return "Insufficient memory"
    if short(node["memory_mib_free"] - reserved_for_others(node, req, MEMORY), req["memory_mib"]):
        return RESERVED_MEMORY
    return _extended_refusal(node, req)


def _extended_refusal(node: Json, req: Json) -> str | None:
    """Every extended resource and the pod slots: what the node has, then less what is held for other pods."""
    free = node["extended_free"]
    for k, v in req["extended"].items():
        have = free.get(k, unlisted_amount(k))
        if short(have, v):
            return "Too many pods" if k == "pods" else f"Insufficient {k}"
        if short(have - extended_reserved_for_others(node, req, k), v):
            return reserved_words(k)
    return None


def why_not(node: Json, req: Json) -> str | None:
    """Why `req` does not fit `node`, in kube-scheduler's words (None: it fits), pod affinity aside (`Offers`)."""
    return rule_refusal(node, req) or resource_refusal(node, req)


def unschedulable(why: list[str | None], req: Json, offered: int) -> str:
    """kube-scheduler's summary of the filters' answers `why` (one per node, None: fits):
    `0/N nodes are available: <count> <reason>, ...`."""
    reasons = Counter(r for r in why if r is not None)
    if offered:   # nodes fit the requests; the placement policy took none of them
        models = f" (allowed GPU models: {'|'.join(req['allowed_models'])})" if req["allowed_models"] else ""
        reasons[f"node(s) fit the requests but not the placement policy{models}"] += offered
    detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    return f"0/{len(why)} nodes are available: {detail or 'no nodes'}."


class Offers:
    """The filters over every node of one pass at once: which nodes a pod fits, and why not the others.

    The answers are `why_not`'s for each node, then pod affinity's (`pods`: where pods run, by default none but
    those `update` counts), computed per pass rather than per pod and node (module docstring). It also sets each
    node's `gpus_usable`: its free GPUs less the reservations held against every pod (`usable_gpus`). That is what
    `place` is told for every node it is offered: a pod that owns a reservation on a node it fits goes there
    without `place`."""

    def __init__(self, view: list[Json], pods: PodPlacement | None = None) -> None:
        self.view = view
        self.pods = pods if pods is not None else PodPlacement(view)
        self.reserving = [i for i, n in enumerate(view) if n["reservations"]]
        self.reserved = {what: np.zeros(len(view), dtype=np.int64) for what in (GPUS, CPU, MEMORY)}
        for what, column in self.reserved.items():
            column[self.reserving] = [reserved(view[i], what) for i in self.reserving]
        self.gpus = np.array([n["gpus_free"] for n in view])
        self.cpu = np.array([n["cpu_milli_free"] for n in view])
        self.memory = np.array([n["memory_mib_free"] for n in view])
        self.extended: dict[str, Any] = {}   # resource -> free per node (one it does not list: `unlisted_amount`)
        self.rules: dict[tuple, tuple[list[str | None], np.ndarray]] = {}
        self._spreading: dict[tuple, np.ndarray] = {}   # (rules, policies) -> nodes a spread constraint counts on
        for n in view:
            n["gpus_usable"] = usable_gpus(n)
        self._last: tuple[list[str | None], Any, list[str], Any] = ([], None, [], None)
        self._fits = np.zeros(len(view), dtype=bool)
        self._admitted = self._fits

    def _free(self, resource: str) -> np.ndarray:
        column = self.extended.get(resource)
        if column is None:
            missing = unlisted_amount(resource)
            column = self.extended[resource] = np.array(
                [n["extended_free"].get(resource, missing) for n in self.view], dtype=float)
        return column

    def _rules(self, req: Json) -> tuple[list[str | None], np.ndarray]:
        volumes = req.get("volumes")
        key = (unsupported(req), req["rules"], volumes.rule if volumes else None)
        if key not in self.rules:
            why = [rule_refusal(n, req) for n in self.view]
            self.rules[key] = (why, np.array([w is None for w in why], dtype=bool))
        return self.rules[key]

    def fitting(self, req: Json) -> np.ndarray:
        """Indices of the nodes `req` fits, in view order; `reasons()` then says why not the others."""
        others = self._others(req)
        gpus, cpu, memory = req["num_gpu"], req["cpu_milli"], req["memory_mib"]
        # host ports first (kube-scheduler's NodePorts comes before NodeResourcesFit); a node where one is taken, or
        # held for another pod, is not admitted either: preemption, which weighs resources only, would free none there
        ports, held = self._ports(req)
        failed = [ports, held, short(self.gpus, gpus), short(self.gpus - others[GPUS], gpus), short(self.cpu, cpu),
                  short(self.cpu - others[CPU], cpu), short(self.memory, memory),
                  short(self.memory - others[MEMORY], memory)]
        words = [PORTS, RESERVED_PORTS, f"Insufficient {GPU_RESOURCE}", RESERVED_GPUS, "Insufficient cpu",
                 RESERVED_CPU, "Insufficient memory", RESERVED_MEMORY]
        for k, v in req["extended"].items():
            failed += [short(self._free(k), v), short(self._free(k) - self._held_extended(req, k), v)]
            words += ["Too many pods" if k == "pods" else f"Insufficient {k}", reserved_words(k)]
        code = np.select(failed, np.arange(1, len(failed) + 1), 0)   # the first check each node fails
        rules, rules_ok = self._rules(req)
        spread = self.pods.refusals(req.get("namespace", ""), req.get("labels") or {}, req["pod_affinity"])
        if req.get("spread"):   # hard topology spread constraints: where its affinity admits it
            skew = self.pods.spread_refusals(req["namespace"], req["labels"], req["spread"],
                                             lambda c: self._spread_nodes(req["rules"], c))
            spread = skew if spread is None else np.where(spread == 0, skew, spread)
        self._last = (rules, code, words, spread)
        self._admitted = (rules_ok if spread is None else rules_ok & (spread == 0)) & ~ports & ~held
        self._fits = self._admitted & (code == 0)
        return np.flatnonzero(self._fits)

    def _ports(self, req: Json) -> tuple[np.ndarray, np.ndarray]:
        """Per node, whether a host port `req` needs is taken there, and whether one is held there for another pod
        (only the few reserving nodes are looked at)."""
        none = np.zeros(len(self.view), dtype=bool)
        if not req.get("host_ports"):
            return none, none
        taken = np.array([port_conflict(n.get("host_ports"), req["host_ports"]) for n in self.view], dtype=bool)
        held = none.copy()
        for i in self.reserving:
            held[i] = port_conflict(ports_reserved_for_others(self.view[i], req), req["host_ports"])
        return taken, held

    def _held_extended(self, req: Json, resource: str) -> np.ndarray:
        """Per node, how much of `resource` is held for pods other than `req` (only the reserving nodes)."""
        held = np.zeros(len(self.view))
        for i in self.reserving:
            held[i] = extended_reserved_for_others(self.view[i], req, resource)
        return held

    def _spread_nodes(self, rules: Any, c: Any) -> np.ndarray:
        """The nodes a topology spread constraint `c` (`k8s_podaffinity.Spread`) of a pod with `rules` counts pods
        on: those its node selector and required affinity admit (unless its `nodeAffinityPolicy` is Ignore), and
        whose taints it tolerates if its `nodeTaintsPolicy` is Honor (once per pass for each)."""
        key = (rules, c.honor_affinity, c.honor_taints)
        nodes = self._spreading.get(key)
        if nodes is None:
            nodes = self._spreading[key] = np.array([
                (not c.honor_affinity or (rules.selector_matches(n["labels"])
                                          and rules.affinity_allows(n["name"], n["labels"])))
                and (not c.honor_taints or rules.untolerated(n["taints"]) is None) for n in self.view], dtype=bool)
        return nodes

    def _others(self, req: Json) -> dict[str, np.ndarray]:
        """Per node, the GPUs, CPU and memory reserved for pods other than `req` that count against it
        (`reserved_for_others`)."""
        view = self.view
        mine = [i for i in self.reserving if _discounted(view[i], req)]
        if not mine:
            return self.reserved
        others = {}
        for what, column in self.reserved.items():   # its own and lower-priority pods' are not held against it
            others[what] = column.copy()
            others[what][mine] = [reserved_for_others(view[i], req, what) for i in mine]
        return others

    def fits(self, i: int) -> bool:
        """Whether the last pod `fitting` was asked about fits node i."""
        return bool(self._fits[i])

    def reserved_for(self, req: Json) -> Json | None:
        """The first node the last pod `fitting` was asked about fits and holds a reservation of its own."""
        return next((self.view[i] for i in self.reserving if self._fits[i] and any(
            k in req["owned"] for k in self.view[i]["reservations"])), None)

    def admitted(self) -> np.ndarray:
        """Nodes whose placement rules and pod affinity admit the last pod `fitting` was asked about, whatever they
        have left."""
        return np.flatnonzero(self._admitted)

    def holds_for(self, req: Json) -> bool:
        """Whether a node holds a reservation of `req`'s own (only the few reserving nodes are looked at)."""
        return any(reservation_key(self.view[i], req) for i in self.reserving)

    def reasons(self) -> list[str | None]:
        """Why the last pod `fitting` was asked about does not fit each node (None: it fits)."""
        rules, code, words, spread = self._last
        spread = [0] * len(rules) if spread is None else spread.tolist()
        return [r if r is not None else words[c - 1] if c else REASONS[a] if a else None
                for r, c, a in zip(rules, code.tolist(), spread, strict=True)]

    def update(self, i: int, req: Json | None = None) -> None:
        """Node i changed (a binding took its share, maybe a reservation): read what it has left again; `req`: the
        pod bound there, counted where pods run from now on."""
        if req is not None:
            affinity = req["pod_affinity"]
            self.pods.add(i, req["namespace"], req["labels"], affinity.anti if affinity else ())
        n = self.view[i]
        self.gpus[i], self.cpu[i], self.memory[i] = n["gpus_free"], n["cpu_milli_free"], n["memory_mib_free"]
        for what, column in self.reserved.items():
            column[i] = reserved(n, what)
        at = bisect.bisect_left(self.reserving, i)
        listed = at < len(self.reserving) and self.reserving[at] == i
        if n["reservations"] and not listed:   # a reservation made in the pass (preemption, a starving pod)
            self.reserving.insert(at, i)
        elif listed and not n["reservations"]:
            del self.reserving[at]
        for k, column in self.extended.items():
            column[i] = n["extended_free"].get(k, unlisted_amount(k))
