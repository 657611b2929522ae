"""Reading a user's YAML file: every way it can fail becomes an InputError naming the file and what is allowed.

Stricter than `yaml.safe_load` where a hand-edited file goes wrong without a word: a key written twice in one
mapping (YAML says keys are unique; PyYAML keeps the last one, so half an edited section vanished) and a
document nested deeper than Python's stack (a RecursionError) are errors. `expect_kind` also refuses top-level
keys and `metadata` keys a gputide document does not have, so a typo (`specs:`, `metadata: {nmae: x}`) is
reported instead of leaving the whole spec at its defaults.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from balancer.errors import InputError


class DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping that names one key twice."""

    def __init__(self, key: Any, line: int) -> None:
        self.key, self.line = key, line
        super().__init__(problem=f"duplicate key {key!r} at line {line}")


MAX_ALIASED_VALUES = 10_000


class AliasBomb(yaml.constructor.ConstructorError):
    """A document whose aliases repeat more values than MAX_ALIASED_VALUES (a 'billion laughs')."""

    def __init__(self, expanded: int) -> None:
        self.expanded = expanded
        super().__init__(problem=f"aliases expand to {expanded} values")


def _expanded(node: yaml.Node, memo: dict[int, int], active: set[int]) -> int:
    """Values in `node` with every alias written out (an alias back into its own anchor counts once)."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in active:
        return 1
    active.add(key)
    children = ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
                else node.value if isinstance(node, yaml.SequenceNode) else [])
    memo[key] = size = 1 + sum(_expanded(child, memo, active) for child in children)
    active.discard(key)
    return size


class BoundedLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses aliases repeating more than MAX_ALIASED_VALUES values: nine anchors of nine
    aliases each are a few hundred bytes that stand for 387 million values, and the error naming one (its repr)
    or the check of a list of them ran for ever. For files other tools also read (a kubeconfig), where a key
    written twice is theirs to judge."""

    def construct_document(self, node: yaml.Node) -> Any:
        memo: dict[int, int] = {}
        expanded = _expanded(node, memo, set())
        if expanded - len(memo) > MAX_ALIASED_VALUES:
            raise AliasBomb(expanded)
        return super().construct_document(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """SafeLoader's, with the Python errors its constructors let out for a value its tag cannot hold (a date
        `2026-13-45`, `!!int abc`, `!!bool maybe`, an integer of more than 4300 digits, `!!map [1]`) as a YAMLError at
        the value. A mapping, set or sequence is built by a generator that SafeLoader resumes after this returns
        (`construct_document`): the rest of it, queued in `state_generators`, is converted the same way."""
        queued = len(self.state_generators)
        try:
            data = super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except _CONSTRUCTOR_ERRORS as exc:
            raise _unfit(node, exc) from exc
        self.state_generators[queued:] = [_marked(g, node) for g in self.state_generators[queued:]]
        return data


_CONSTRUCTOR_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError)


def _unfit(node: yaml.Node, exc: Exception) -> yaml.constructor.ConstructorError:
    problem = f"{_value_text(node)} is not a valid {_tag_text(node.tag)} ({exc})"[:300]
    return yaml.constructor.ConstructorError(None, None, problem, node.start_mark)


def _marked(generator: Iterator[Any], node: yaml.Node) -> Iterator[Any]:
    """`generator` (the rest of `node`'s construction), its Python errors as `_unfit`'s YAMLError."""
    try:
        yield from generator
    except yaml.YAMLError:
        raise
    except _CONSTRUCTOR_ERRORS as exc:
        raise _unfit(node, exc) from exc


def _tag_text(tag: str) -> str:
    return tag.replace("tag:yaml.org,2002:", "!!")


def _value_text(node: yaml.Node) -> str:
    if isinstance(node, yaml.ScalarNode):
        return repr(node.value if len(node.value) <= 40 else node.value[:40] + "...")
    return "the value"


class _StrictLoader(BoundedLoader):
    """`BoundedLoader` that also refuses a key written twice in one mapping (merge keys `<<` may still be
    overridden)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # SafeLoader reports an unhashable key itself
            if key in seen:
                raise DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path, what: str) -> Any:
    """The parsed document of `path`; `what` names the expected kind of file (e.g. "fleet spec") for errors."""
    return parse_yaml(_read(path, what), str(path))


def read_yaml_all(path: str | Path, what: str) -> list[Any]:
    """Every document of a multi-document YAML file (`---` between them), e.g. Kubernetes manifests."""
    return parse_yaml(_read(path, what), str(path), every=True)


def parse_yaml(text: str, file: str, *, every: bool = False) -> Any:
    """`text` parsed (all its documents with `every`); unparseable YAML is an InputError naming `file`."""
    try:
        return list(yaml.load_all(text, _StrictLoader)) if every else yaml.load(text, _StrictLoader)  # noqa: S506
    except DuplicateKey as exc:
        raise InputError(file, _key_text(exc.key), f"a second {exc.key!r} at line {exc.line}",
                         "each key once in a mapping (YAML keeps only the last, silently)") from exc
    except AliasBomb as exc:
        raise InputError(file, "(document)", f"aliases that expand to {exc.expanded} values",
                         f"YAML whose anchors and aliases (&a, *a) repeat at most {MAX_ALIASED_VALUES} values") from exc
    except yaml.YAMLError as exc:
        raise InputError(file, "(document)", "unparseable YAML", "valid YAML", _problem(exc)) from exc
    except RecursionError as exc:
        raise InputError(file, "(document)", "nested too deeply to read", "YAML nested at most a few hundred "
                         "levels") from exc


def _problem(exc: yaml.YAMLError) -> str:
    """What PyYAML found wrong and where (`found character '\\t' that cannot start any token, line 7 column 1`): its
    message's first line is only the context ('while scanning for the next token'), which finds nothing in a file."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return str(exc).splitlines()[0]
    what = ", ".join(p for p in (exc.context, exc.problem) if p).replace("\t", "\\t") or "unreadable"  # tab shown
    mark = exc.problem_mark or exc.context_mark
    return f"{what}, line {mark.line + 1} column {mark.column + 1}" if mark else what


def _key_text(key: Any) -> str:
    """A YAML key as a field name: strings as they are, anything else (1, None, true) as Python writes it."""
    return key if isinstance(key, str) else repr(key)


def _read(path: str | Path, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), "(file)", str(path), f"a readable {what} YAML file (UTF-8)", str(exc)) from exc


API_VERSION = "gputide/v1alpha1"
METADATA_KEYS = ("name", "namespace", "labels", "annotations")


def expect_kind(doc: Any, file: str | None, kind: str, keys: str = "apiVersion, kind, spec") -> Mapping:
    """`doc` when it is a mapping of apiVersion gputide/v1alpha1 and this `kind` with no top-level key but
    `keys` (comma-separated) and `metadata`, whose metadata is a mapping of METADATA_KEYS; else the InputError
    saying which."""
    if not isinstance(doc, Mapping):   # None: an empty file (or comments only), e.g. an editor's write caught half-way
        raise InputError(file, "(document)", "an empty file" if doc is None else f"a YAML {type(doc).__name__}",
                         f"a mapping with {keys}")
    if doc.get("apiVersion") != API_VERSION:
        raise InputError(file, "apiVersion", doc.get("apiVersion"), API_VERSION)
    if doc.get("kind") != kind:
        raise InputError(file, "kind", doc.get("kind"), kind)
    allowed = [k.strip() for k in keys.split(",")] + ["metadata"]
    unknown = sorted((k for k in doc if k not in allowed), key=str)  # YAML keys may be ints, None, booleans
    if unknown:
        raise InputError(file, _key_text(unknown[0]), doc[unknown[0]], "one of the keys " + ", ".join(allowed))
    meta = doc.get("metadata")
    if meta is not None:
        if not isinstance(meta, Mapping):
            raise InputError(file, "metadata", meta, "a mapping such as {name: production}")
        unknown = sorted((k for k in meta if k not in METADATA_KEYS), key=str)
        if unknown:
            raise InputError(file, f"metadata.{unknown[0]}", meta[unknown[0]],
                             "one of the keys " + ", ".join(METADATA_KEYS))
        if "name" in meta and (not isinstance(meta["name"], str) or not meta["name"].strip()):
            raise InputError(file, "metadata.name", meta["name"], "a non-empty string")
    return doc


def document_name(doc: Mapping, default: str) -> str:
    """The metadata.name of a document `expect_kind` accepted, else `default`."""
    return (doc.get("metadata") or {}).get("name", default)
