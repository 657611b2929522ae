"""`gputide check FILE...`: validate gputide's own files before they reach a cluster, as `promtool check` does.

    gputide check deploy/base/policy.yaml my-fleet.yaml services.yaml

Each file may hold a `BalancerPolicy`, a `FleetSpec` or `ServiceProfiles` document, or Kubernetes manifests whose
`ConfigMap`s carry one in their `data` (the way the deployment ships them: `kubectl apply` would accept an invalid
policy, and a running controller would refuse it, so it is better caught in CI). Every document is checked with
the loader the controller uses at start, so the answer is the same: one line per document that says what it
holds (for a policy, the fields it sets away from the defaults), or the error naming the file, the field, the value
and what is allowed. Exit code 0 when every file is valid, 2 when any is not (all files are checked).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from balancer import config, fleet
from balancer.app.capacity_run import profiles_from_dict
from balancer.errors import EXIT_INPUT_ERROR, InputError
from balancer.yamlfile import parse_yaml, read_yaml_all


def _shown(value: Any) -> str:
    """A field's value as it is written in the YAML file."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _policy(doc: Any, where: str) -> str:
    # what gputide run refuses at start beyond the file's own rules
    from balancer.cmd.run import stale_after

    p = config.from_dict(doc, where)
    stale_after(None, p, where)
    default = config.BalancerPolicy()
    changed = [f"spec.{sec}.{config.camel(f.name)}={_shown(getattr(getattr(p, sec), f.name))}"
               for sec in config.SECTIONS for f in fields(getattr(p, sec))
               if getattr(getattr(p, sec), f.name) != getattr(getattr(default, sec), f.name)]
    return f"BalancerPolicy '{p.name}', " + (f"{len(changed)} field(s) away from the defaults: " + ", ".join(changed)
                                             if changed else "every field at its default")


def _fleet(doc: Any, where: str) -> str:
    f = fleet.from_dict(doc, where)
    models = sorted({g.model for g in f.gpus})
    return f"FleetSpec '{f.name}', {len(f.nodes)} node(s), {f.n_gpus} GPU(s): {', '.join(models)}"


def _services(doc: Any, where: str) -> str:
    profiles = profiles_from_dict(doc, where)
    return f"ServiceProfiles, {len(profiles)} service(s): {', '.join(profiles)}"


KINDS: dict[str, Callable[[Any, str], str]] = {"BalancerPolicy": _policy, "FleetSpec": _fleet,
                                               "ServiceProfiles": _services}


def _one(doc: Any, where: str) -> str:
    kind = doc.get("kind") if isinstance(doc, Mapping) else None
    check = KINDS.get(kind) if isinstance(kind, str) else None
    if check is None:
        raise InputError(where, "kind", kind, "one of " + ", ".join(KINDS) + " (or a ConfigMap whose data holds one)")
    return check(doc, where)


_MENTIONS_OURS = re.compile(r"gputide/|\b(?:" + "|".join(KINDS) + r")\b")


def _config_map(doc: Mapping, where: str) -> list[tuple[str, str]]:
    """(where, summary) for each entry of a ConfigMap's data that is a gputide document; other entries are not ours."""
    name = (doc.get("metadata") or {}).get("name", "?") if isinstance(doc.get("metadata"), Mapping | None) else "?"
    data = doc.get("data") or {}
    if not isinstance(data, Mapping):
        raise InputError(where, f"ConfigMap {name}: data", data, "a mapping of keys to text")
    out = []
    for key, text in data.items():
        at = f"{where} (ConfigMap {name}, data.{key})"
        if not isinstance(text, str):
            continue
        try:
            inner = parse_yaml(text, at)
        except InputError:
            if _MENTIONS_OURS.search(text):
                raise
            continue   # another tool's file (an nginx.conf, a script), which need not be YAML
        if _ours(inner):
            out.append((at, _one(inner, at)))
    return out


def _ours(doc: Any) -> bool:
    """Whether `doc` is meant as a gputide document: one of our kinds, or any gputide/ apiVersion (a wrong version
    of ours is an error to report, not another tool's object to leave alone)."""
    if not isinstance(doc, Mapping):
        return False
    api, kind = doc.get("apiVersion"), doc.get("kind")
    return (isinstance(kind, str) and kind in KINDS) or (isinstance(api, str) and api.startswith("gputide"))


def check_file(path: str) -> list[tuple[str, str]]:
    """(where, what it holds) for every gputide document in `path`; InputError on the first invalid one."""
    stream = read_yaml_all(path, "gputide")
    docs = [d for d in stream if d is not None]
    found: list[tuple[str, str]] = []
    for i, doc in enumerate(docs):
        where = path if len(docs) == 1 else f"{path} (document {i + 1})"
        if isinstance(doc, Mapping) and doc.get("kind") == "ConfigMap" and doc.get("apiVersion") == "v1":
            found += _config_map(doc, where)
        elif isinstance(doc, Mapping) and doc.get("apiVersion") is not None and not _ours(doc):
            continue   # another Kubernetes object in a manifest file: not ours to check
        elif len(stream) > 1:   # the controller reads --policy, --fleet and --services as one document each
            raise InputError(where, "(document)", f"one of {len(stream)} YAML documents in the file",
                             "a file holding only this document, as gputide run reads it ('---' starts another; "
                             "a ConfigMap manifest may hold several)")
        else:
            found.append((where, _one(doc, where)))
    if not found:
        raise InputError(path, "kind", None, "a file holding " + ", ".join(KINDS) + " (or a ConfigMap whose data "
                                             "holds one)")
    return found


def run(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            for where, what in check_file(path):
                print(f"{where}: ok, {what}")
        except InputError as exc:
            failed += 1
            print(f"gputide: error: {exc}", file=sys.stderr)
    return EXIT_INPUT_ERROR if failed else 0


def register(subparsers) -> None:
    p = subparsers.add_parser("check", help="validate policy, fleet and service-profile files (also inside "
                                            "ConfigMap manifests); exit 2 if any is invalid")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=run)
