"""Reading a user's YAML file: every way it can fail becomes an InputError naming the file and what is allowed."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from balancer.errors import InputError


def read_yaml(path: str | Path, what: str) -> Any:
    """The parsed document of `path`; `what` names the expected kind of file (e.g. "fleet spec") for errors."""
    return parse_yaml(_read(path, what), str(path))


def read_yaml_all(path: str | Path, what: str) -> list[Any]:
    """Every document of a multi-document YAML file (`---` between them), e.g. Kubernetes manifests."""
    return parse_yaml(_read(path, what), str(path), every=True)


def parse_yaml(text: str, file: str, *, every: bool = False) -> Any:
    """`text` parsed (all its documents with `every`); unparseable YAML is an InputError naming `file`."""
    try:
        return list(yaml.safe_load_all(text)) if every else yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(file, "(document)", "unparseable YAML", "valid YAML", str(exc).splitlines()[0]) from exc


def _read(path: str | Path, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), "(file)", str(path), f"a readable {what} YAML file (UTF-8)", str(exc)) from exc


API_VERSION = "gputide/v1alpha1"


def expect_kind(doc: Any, file: str | None, kind: str, keys: str = "apiVersion, kind, spec") -> Mapping:
    """`doc` when it is a mapping of apiVersion gputide/v1alpha1 and this `kind`; else the InputError saying which."""
    if not isinstance(doc, Mapping):
        raise InputError(file, "(document)", type(doc).__name__, f"a mapping with {keys}")
    if doc.get("apiVersion") != API_VERSION:
        raise InputError(file, "apiVersion", doc.get("apiVersion"), API_VERSION)
    if doc.get("kind") != kind:
        raise InputError(file, "kind", doc.get("kind"), kind)
    return doc
