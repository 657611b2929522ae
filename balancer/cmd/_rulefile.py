"""The shape of a Prometheus rule file, checked before gputide writes a config that loads it or runs Prometheus.

Prometheus refuses a rule file whose shape is wrong (promtool: 'cannot unmarshal', 'Groupname must not be
empty', 'one of record or alert must be set', 'groupname is repeated'): `prometheus --run` exited 1 with
Prometheus' log and `--config-only` wrote a config Prometheus would not load. These are the same checks, as an
`InputError` naming the file, the field, the value and what is allowed. PromQL itself is left to Prometheus.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from balancer.errors import InputError

GROUP_KEYS = ("name", "interval", "query_offset", "limit", "labels", "rules")
RULE_KEYS = ("record", "alert", "expr", "for", "keep_firing_for", "labels", "annotations")


def check_rule_file(doc: Any, file: str) -> None:
    """Refuse `doc` (a parsed rule file) unless Prometheus would load its groups and rules; empty is allowed."""
    if doc is None:
        return
    if not isinstance(doc, Mapping):
        raise InputError(file, "(document)", type(doc).__name__, "a mapping with the key groups")
    for key in doc:
        if key != "groups":
            raise InputError(file, str(key), doc[key], "only the key groups")
    groups = doc.get("groups")
    if groups is None:
        return
    if not isinstance(groups, list):
        raise InputError(file, "groups", groups, "a list of rule groups")
    names: set[str] = set()
    for i, group in enumerate(groups):
        _check_group(group, f"groups[{i}]", file, names)


def _check_group(group: Any, at: str, file: str, names: set[str]) -> None:
    if not isinstance(group, Mapping):
        raise InputError(file, at, group, "a mapping with name and rules")
    _known_keys(group, GROUP_KEYS, at, file)
    name = group.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InputError(file, f"{at}.name", name, "a non-empty group name")
    if name in names:
        raise InputError(file, f"{at}.name", name, "a group name no earlier group of the file has")
    names.add(name)
    rules = group.get("rules")
    if rules is None:
        return
    if not isinstance(rules, list):
        raise InputError(file, f"{at}.rules", rules, "a list of rules")
    for j, rule in enumerate(rules):
        where = f"{at}.rules[{j}]"
        if not isinstance(rule, Mapping):
            raise InputError(file, where, rule, "a mapping with record or alert, and expr")
        _known_keys(rule, RULE_KEYS, where, file)
        if ("record" in rule) == ("alert" in rule):
            raise InputError(file, where, dict(rule), "exactly one of record and alert")
        kind = "record" if "record" in rule else "alert"
        if not isinstance(rule[kind], str) or not rule[kind].strip():
            raise InputError(file, f"{where}.{kind}", rule[kind], "a non-empty name")
        if not isinstance(rule.get("expr"), str | int | float) or isinstance(rule.get("expr"), bool) \
                or not str(rule["expr"]).strip():
            raise InputError(file, f"{where}.expr", rule.get("expr"), "a PromQL expression")


def _known_keys(doc: Mapping, allowed: tuple[str, ...], at: str, file: str) -> None:
    for key in doc:
        if key not in allowed:
            raise InputError(file, f"{at}.{key}", doc[key], "one of the keys " + ", ".join(allowed))
