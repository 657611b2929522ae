"""The Kubernetes API requests each gputide command makes, read from the code: what its RBAC must grant.

Every request to the API server goes through a method of the official client on an attribute of the gateway's
`_Api` (`api.core.read_node`, `core.list_node`, `self.api.custom.patch_cluster_custom_object`, ...;
balancer/actuate/kubernetes.py). For each such method the code names, the client's own request builder
(`_<method>_serialize`) gives the HTTP method and path, hence RBAC's (API group, resource[/subresource], verb):
GET of one object is `get`, of a collection `list`; a list method handed to a watch cache (`ListWatch` /
`ListCache`, directly or through a helper that passes it on) is also `watch`; a custom object's group and plural
come from the call's arguments (constants such as `KUEUE`).

A command's requests are those of the functions and classes reachable by name from its `run`
(balancer/cmd/<command>.py), through every module of balancer/ and exporters/; the gateway `_Api` counts by the
methods used on it (`update_node`), not as a whole. So a class only `gputide schedule` builds counts for the
scheduler, not for the controller.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("balancer", "exporters")
GATEWAY = "balancer.actuate.kubernetes._Api"
WATCH_CACHES = {"ListWatch", "ListCache"}
WATCH_FN_INDEX = 2   # ListWatch(what, list_call, watch_fn, ...) and ListCache(what, list_call, watch_fn, ...)
VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}
Request = tuple[str, str, str]   # (API group, resource[/subresource], verb), as RBAC names them


@functools.cache
def client_apis() -> dict[str, type]:
    """{attribute of `_Api`: the generated client API class on it} (core: CoreV1Api, ...)."""
    from kubernetes import client as k8s

    from balancer.actuate.kubernetes import _Api

    api = _Api(k8s.ApiClient(), 0, 0.0, lambda _s: None, 1.0)
    return {name: type(obj) for name, obj in vars(api).items()
            if type(obj).__module__.startswith("kubernetes.client.api.")}


@functools.cache
def endpoint(cls: type, method: str) -> tuple[str, str]:
    """(HTTP method, path template) the client sends for `cls.method`, from its request builder."""
    src = inspect.getsource(getattr(cls, f"_{method}_serialize"))
    return re.search(r"method='(\w+)'", src)[1], re.search(r"resource_path='([^']+)'", src)[1]


def to_rbac(http: str, path: str, params: dict[str, object]) -> Request:
    """RBAC's (group, resource[/subresource], verb) of a request; `{group}` and `{plural}` from `params`."""
    parts = [str(params.get(p[1:-1], p)) if p in ("{group}", "{plural}") else p for p in path.strip("/").split("/")]
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if len(rest) > 2 and rest[:2] == ["namespaces", "{namespace}"]:
        rest = rest[2:]
    named = len(rest) > 1
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    if http == "GET":
        verb = "get" if named else "list"
    elif http == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = VERBS[http]
    return group, resource, verb


# ---- the code: modules, their definitions, and the names between them ------------------------------------------


@functools.cache
def modules() -> dict[str, ast.Module]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            out[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return out


@functools.cache
def definitions() -> dict[str, ast.AST]:
    """{"module.name": node} of every top-level function and class, and `_Api.<method>` of the gateway."""
    out: dict[str, ast.AST] = {}
    for mod, tree in modules().items():
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                out[f"{mod}.{node.name}"] = node
    for node in out[GATEWAY].body:
        if isinstance(node, ast.FunctionDef):
            out[f"{GATEWAY}.{node.name}"] = node
    return out


@functools.cache
def imported(mod: str) -> dict[str, str]:
    """{local name: "module.name" or "module"} of every `from X import Y [as Z]` of gputide's own in `mod`."""
    out = {}
    for node in ast.walk(modules()[mod]):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def resolve(mod: str, name: str) -> str | None:
    """The definition or module `name` means in `mod` (following re-exports), or None."""
    target = f"{mod}.{name}" if f"{mod}.{name}" in definitions() else imported(mod).get(name)
    for _ in range(5):
        if target is None or target in definitions() or target in modules():
            return target
        owner, _, leaf = target.rpartition(".")
        target = imported(owner).get(leaf) if owner in modules() else None
    return None


def _nodes(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk without type annotations (a name used as a type builds nothing)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        for field, value in ast.iter_fields(n):
            if field in ("annotation", "returns"):
                continue
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST):
                    stack.append(child)


@functools.cache
def _references(key: str) -> frozenset[str]:
    mod = _module_of(key)
    gateway_methods = {k.rsplit(".", 1)[1] for k in definitions() if k.startswith(GATEWAY + ".")}
    out: set[str] = set()
    for n in _nodes(definitions()[key]):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            target = resolve(mod, n.id)
            if target in definitions() and target != GATEWAY:
                out.add(target)
        elif isinstance(n, ast.Attribute):
            if isinstance(n.value, ast.Name) and resolve(mod, n.value.id) in modules():
                target = resolve(resolve(mod, n.value.id), n.attr)
                if target in definitions():
                    out.add(target)
            if n.attr in gateway_methods:
                out.add(f"{GATEWAY}.{n.attr}")
    return frozenset(out)


@functools.cache
def reachable(root: str) -> frozenset[str]:
    seen, todo = set(), [root]
    while todo:
        key = todo.pop()
        if key not in seen:
            seen.add(key)
            todo += _references(key) - seen
    return frozenset(seen)


# ---- the client methods a definition names, and how --------------------------------------------------------------


def _module_of(key: str) -> str:
    mod = key
    while mod not in modules():
        mod = mod.rpartition(".")[0]
    return mod


def _forwarders(node: ast.AST) -> dict[str, int]:
    """{function name: index of the argument it hands to a watch cache as its watch function}."""
    out = {}
    for fn in _nodes(node):
        if not isinstance(fn, ast.FunctionDef):
            continue
        params = [a.arg for a in fn.args.args if a.arg != "self"]
        for call in _nodes(fn):
            if (isinstance(call, ast.Call) and _callee(call) in WATCH_CACHES and len(call.args) > WATCH_FN_INDEX
                    and isinstance(call.args[WATCH_FN_INDEX], ast.Name) and call.args[WATCH_FN_INDEX].id in params):
                out[fn.name] = params.index(call.args[WATCH_FN_INDEX].id)
    return out


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _client_method(n: ast.AST) -> tuple[type, str] | None:
    if not isinstance(n, ast.Attribute):
        return None
    base = n.value.attr if isinstance(n.value, ast.Attribute) else getattr(n.value, "id", None)
    cls = client_apis().get(base)
    if cls is None or n.attr.startswith("_") or not callable(getattr(cls, n.attr, None)):
        return None
    return cls, n.attr


def _positional(mod: str, args: list[ast.expr]) -> list[object]:
    values: list[object] = []
    for a in args:
        if isinstance(a, ast.Starred) and isinstance(a.value, ast.Name):
            values += list(getattr(importlib.import_module(mod), a.value.id))
        else:
            values.append(a.value if isinstance(a, ast.Constant) else None)
    return values


@functools.cache
def requests_of(key: str) -> frozenset[Request]:
    """The requests definition `key` makes (its own code, nested functions included)."""
    mod, node = _module_of(key), definitions()[key]
    forwarders = _forwarders(modules()[mod])
    out: set[Request] = set()
    handled: set[int] = set()
    for call in (c for c in _nodes(node) if isinstance(c, ast.Call)):
        for i, arg in enumerate(call.args):
            found = _client_method(arg)
            if found is None:
                continue
            cls, method = found
            handled.add(id(arg))
            names = [p for p in inspect.signature(getattr(cls, method)).parameters if p != "self"]
            params = dict(zip(names, _positional(mod, call.args[i + 1:]), strict=False))
            request = to_rbac(*endpoint(cls, method), params)
            out.add(request)
            callee = _callee(call)
            if (callee in WATCH_CACHES and i == WATCH_FN_INDEX) or forwarders.get(callee) == i:
                out.add((request[0], request[1], "watch"))
    for n in _nodes(node):
        found = _client_method(n)
        if found is not None and id(n) not in handled:
            out.add(to_rbac(*endpoint(*found), {}))
    return frozenset(out)


@functools.cache
def requests_of_command(command_module: str) -> frozenset[Request]:
    """Every request the command of balancer/cmd/<command_module>.py may make."""
    out: set[Request] = set()
    for key in reachable(f"balancer.cmd.{command_module}.run"):
        out |= requests_of(key)
    return frozenset(out)


# Requests a command makes only with a flag given: {command module: {(group, resource): the flag's argparse dest}}.
# The code is reachable either way (reading it cannot tell), so the gate is declared here and proved by
# tests/deploy/test_deploy_rbac_gates.py: ScaleInference, the only action that reads and patches HPAs or a
# Deployment's scale, comes from the capacity planner alone, which `gputide run` builds only with --services; the
# ClusterQueues are read and patched only for the queues --kueue-queues names.
FLAG_GATED: dict[str, dict[tuple[str, str], str]] = {
    "run": {("autoscaling", "horizontalpodautoscalers"): "services", ("apps", "deployments/scale"): "services",
            ("apps", "deployments"): "services",   # read before its scale: another controller's is refused
            ("", "configmaps"): "services",   # the record of the operator's Deployment counts (k8s_deploy_record)
            ("kueue.x-k8s.io", "clusterqueues"): "kueue_queues"},
}


def requests_of_container(command_module: str, args: object) -> frozenset[Request]:
    """The requests of the command run with `args` (its parsed arguments): those behind a flag it was not given
    (`FLAG_GATED`) left out."""
    gates = FLAG_GATED.get(command_module, {})
    return frozenset(r for r in requests_of_command(command_module)
                     if r[:2] not in gates or getattr(args, gates[r[:2]], None))
