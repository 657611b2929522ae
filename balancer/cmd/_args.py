"""Command-line values every sub-command checks the same way, before any work starts.

argparse turns `--seed -1`, `--speed nan` or `--json /no/such/dir/x.json` into values without a word; numpy then
raises on the seed, a NaN speed runs a clock that never advances, and an unwritable output path fails after
minutes of work, each as a traceback. These helpers turn them into `InputError`s naming the flag, the value and
what is allowed (exit code 2). (The module name starts with `_`: `balancer.cli` does not take it for a
sub-command.)
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

import yaml

from balancer.errors import EXIT_INPUT_ERROR, InputError
from balancer.yamlfile import MAX_ALIASED_VALUES, AliasBomb, BoundedLoader

MAX_EPOCH_S = 4102444800.0  # 2100-01-01
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


MOST_INTERVAL_S = 86400.0   # a loop's longest interval: at least one cycle a day
LEAST_INTERVAL_S = 0.05     # a loop's shortest: twenty cycles a second (`--interval 1e-320` passed and spun a core)


def parse_interval(text: str, field: str = "--interval", *, allow_zero: bool = False,
                   most: float = math.inf, least: float = 0.0) -> float:
    """Seconds from `30s`, `1m`, `500ms`, `2h`, `14d` or a number: finite and positive (or 0 with `allow_zero`), at
    least `least` and at most `most` (a loop's interval: `loop_interval`). float() reads `inf` and `nan` (and `1e999`
    as inf): a loop every `inf` seconds never runs a second cycle, and one every `1e308` seconds crashed after its
    first (a lease or a deadline of three intervals overflows)."""
    number, scale = text, 1.0
    for unit in sorted(_UNITS, key=len, reverse=True):
        if text.endswith(unit):
            number, scale = text[: -len(unit)], _UNITS[unit]
            break
    try:
        value = float(number) * scale
    except ValueError:
        value = math.nan
    if math.isfinite(value) and (value > 0 or (allow_zero and value == 0)) and least <= value <= most:
        return value
    what = "a finite duration >= 0" if allow_zero else "a finite positive duration"
    if least > 0:
        what += f" from {least:g}s"
    if math.isfinite(most):
        what += f" up to {most:g}s" + (" (24h)" if most == MOST_INTERVAL_S else "")
    raise InputError(None, field, text, f"{what} such as 30s, 1m or 500ms")


def loop_interval(text: str, field: str = "--interval", *, least: float = LEAST_INTERVAL_S,
                  most: float = MOST_INTERVAL_S) -> float:
    """A loop's time between cycles (`parse_interval`), from `least` (no busy loop) to `most` (a day by default)."""
    return parse_interval(text, field, least=least, most=most)


def given(flag: str, allowed: str = "a file path") -> Callable[[str], str]:
    """argparse `type=` for a flag that names a file, a folder or a name: an empty (or blank) value is refused as the
    command line is read (`NegativeValues`: one line naming the flag, exit 2). Commands test these with `if
    args.x:`, so `--shard ""` ran unsharded (acting on every node), `--controller-policy ""` dropped the policy's
    emergency stop, `--policy ""` ran the defaults, and `--csv ""` or `--node ""` ended in a traceback."""
    def check(text: str) -> str:
        if not text.strip():
            raise InputError(None, flag, text, f"{allowed}, not empty (leave {flag} out for its default)")
        return text

    check.__name__ = flag   # what argparse would name in a message of its own
    return check


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL = re.compile(_DNS_LABEL)   # a namespace's name (Kubernetes' IsDNS1123Label), at most 63
DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")   # most objects' names (IsDNS1123Subdomain), at most 253
_NAME_KINDS = {"label": (DNS_LABEL, 63, "lower-case letters, digits and '-', starting and ending with a letter or "
                                        "digit"),
               "subdomain": (DNS_SUBDOMAIN, 253, "lower-case letters, digits, '-' and '.', each part starting and "
                                                 "ending with a letter or digit")}


def is_k8s_name(text: str, kind: str = "subdomain") -> bool:
    """Whether the Kubernetes API takes `text` as a name of `kind` (DNS-1123 "subdomain" or "label"): its pattern
    and length, the one test behind `k8s_name` and the commands that word their own refusal."""
    pattern, most, _ = _NAME_KINDS[kind]
    return len(text) <= most and pattern.fullmatch(text) is not None


def k8s_name(text: str, flag: str, what: str, kind: str = "subdomain") -> str:
    """`text` when it is a name the Kubernetes API takes (`kind`: a DNS-1123 "subdomain", as a Lease's, a node's or
    a pod's schedulerName, or a "label", as a namespace's), else an InputError naming `flag`, the value and `what` it
    names. The API refuses any other (422), or never finds it: `--lease-name Bad_Name` ran as a standby for ever
    ("not the leader"), and `--scheduler-name 'Bad Name'` waited for pods no pod can name."""
    if not is_k8s_name(text, kind):
        _, most, chars = _NAME_KINDS[kind]
        raise InputError(None, flag, text, f"{what}: a DNS-1123 {kind} ({chars}; at most {most})")
    return text


def lease_flags(args: argparse.Namespace) -> None:
    """`gputide run`'s and `gputide schedule`'s --lease-name (a Lease's name: a DNS-1123 subdomain) and
    --lease-namespace (a namespace's: a label), checked before anything connects: the API server refused any other
    name at every election (422), and the replica ran on as a standby for ever, `--once` exiting 0 as "not the
    leader". Checked once the line is read, not as it is (argparse `type=`): a manifest's `$(POD_NAMESPACE)` is the
    kubelet's to fill in, and tests/deploy parse the manifests' args as written."""
    k8s_name(args.lease_name, "--lease-name", "a Lease's name")
    if args.lease_namespace is not None:
        k8s_name(args.lease_namespace, "--lease-namespace", "a namespace's name", "label")


def distinct(texts: list[str], flag: str, keys: list | None = None, *,
             values: str = "comma-separated values") -> None:
    """InputError naming the first of `texts` (a comma-separated flag's values, or a repeated flag's: `values`
    says which) that repeats an earlier one, by `keys` where given (`1h,60m`: one horizon): `--stages live,live`
    ran the stage twice, `--models a,a` scored one model twice."""
    seen: dict = {}
    for text, key in zip(texts, texts if keys is None else keys, strict=True):
        if key in seen:
            same = "given twice" if seen[key] == text else f"the same as {seen[key]}"
            raise InputError(None, flag, text, f"{values}, each once ({text} is {same})")
        seen[key] = text


def only_with(args: argparse.Namespace, flags: Mapping[str, tuple[str, object]], applies: bool,
              allowed: str) -> None:
    """Flags that apply only with another ({flag: (attribute, default)}, each None on the command line when left
    out): where they do not apply (`applies` false), the first given is an InputError naming it, its value and
    `allowed` ("only with ..."), not a value read by nothing and an exit 0; each left out is then set to its
    default. A flag's own value check comes before, where it is written."""
    if not applies:
        for flag, (attr, _) in flags.items():
            if getattr(args, attr) is not None:
                raise InputError(None, flag, getattr(args, attr), allowed)
    for attr, default in flags.values():
        if getattr(args, attr) is None:
            setattr(args, attr, default)


def seed(value: int, flag: str = "--seed") -> int:
    """A random seed: numpy takes any integer >= 0 and raises on a negative one."""
    if value < 0:
        raise InputError(None, flag, value, "an integer >= 0")
    return value


def number(value: float, flag: str, lo: float, hi: float = math.inf, *, above: bool = False,
           unit: str = "") -> float:
    """`value` when finite and from `lo` (exclusive with `above`) to `hi`; NaN and inf never pass."""
    low_ok = value > lo if above else value >= lo
    if not (math.isfinite(value) and low_ok and value <= hi):
        bound = f"{'>' if above else '>='} {lo:g}" + (f" and <= {hi:g}" if math.isfinite(hi) else "")
        raise InputError(None, flag, value, f"a finite number {bound}{unit}")
    return value


def duration(text: str, flag: str, *, allow_zero: bool = False, most: float = math.inf) -> float:
    """Seconds from `30s`, `1m`, `500ms` or a number (`parse_interval`)."""
    return parse_interval(text, flag, allow_zero=allow_zero, most=most)


def duration_between(text: str, flag: str, least: float, most: float, allowed: str) -> float:
    """Seconds from `text` (`parse_interval`) from `least` to `most`; anything else names `allowed`."""
    try:
        seconds = parse_interval(text, flag)
    except InputError:
        seconds = math.nan
    if not least <= seconds <= most:
        raise InputError(None, flag, text, allowed)
    return seconds


def epoch(text: str | None, flag: str) -> float:
    """A time as epoch seconds from `now` (or None), epoch seconds or ISO-8601 (naive: UTC), 1970 to 2100."""
    if text is None or text == "now":
        return time.time()
    allowed = "now, epoch seconds or an ISO-8601 time, from 1970 to 2100"
    try:
        value = float(text)
    except ValueError:
        try:
            stamp = datetime.fromisoformat(text)
        except ValueError as exc:
            raise InputError(None, flag, text, allowed) from exc
        value = (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
    if not 0 <= value <= MAX_EPOCH_S:   # NaN fails too
        raise InputError(None, flag, text, allowed)
    return value


def output_file(path: str | None, flag: str, inputs: dict[str, str | None] | None = None) -> str | None:
    """A file to write at the end of a run, checked at its start: not a folder, in a folder that exists, and none
    of the run's `inputs` ({flag: path}; the same file by any name, a link too): `--json trace.csv` wrote the
    backtest over the trace it had just read. '-' (standard output, `write_json`) passes as it is."""
    if path is None or path == STDOUT:
        return path
    target = Path(path)
    allowed = "a writable file path in an existing folder"
    if target.is_dir() or not target.parent.is_dir():
        raise InputError(None, flag, path, allowed)
    for other_flag, other in (inputs or {}).items():
        if other not in (None, STDOUT) and _same_file(path, other):
            raise InputError(None, flag, path, "a file other than the run's inputs",
                             f"it is the input {other_flag} {other}, which writing would overwrite")
    try:   # a folder this process cannot write in (or a file it cannot write) failed after the run, a traceback
        if target.exists():
            with open(target, "r+b"):   # opened, not truncated: the file is left as it is
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".gputide-probe-"):
                pass
    except OSError as exc:
        raise InputError(None, flag, path, allowed, exc.strerror or str(exc)) from exc
    return path


STDOUT = "-"   # an output path meaning standard output, as Unix tools read it


def write_json(path: str, doc: object, **dump) -> None:
    """`doc` as JSON (json.dump's `dump` options) into the file at `path`, or onto standard output when `path` is
    '-': `--json -` wrote a file named '-', so `gputide place ... --json - | jq` read nothing."""
    if path == STDOUT:
        json.dump(doc, sys.stdout, **dump)
        sys.stdout.write("\n")
        return
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, **dump)


def report_to(path: str | None) -> contextlib.AbstractContextManager:
    """Where a command's human report (its table) is printed: standard output, or standard error for a run whose
    `--json -` takes standard output, so that the JSON there is all a reader (jq) gets."""
    return contextlib.redirect_stdout(sys.stderr) if path == STDOUT else contextlib.nullcontext()


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one existing file (a path not there yet is no file to overwrite)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def output_dir(path: str, flag: str) -> str:
    """A folder to write into (created if missing): neither it nor any folder above it may be a file."""
    for p in (Path(path), *Path(path).absolute().parents):
        if p.exists():
            if not p.is_dir():
                raise InputError(None, flag, path, "a folder, or a path where one can be created")
            break
    return path


def appendable_file(path: str | None, flag: str) -> str | None:
    """A file a long run appends to (an audit log), checked at its start by opening it for appending (which
    creates it, as the run would): a folder, a missing folder or a path not writable here is refused, not a
    traceback after the run has begun."""
    if path is None:
        return None
    allowed = "a file this process can append to, in an existing folder"
    if Path(path).is_dir():
        raise InputError(None, flag, path, allowed, "a folder")
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise InputError(None, flag, path, allowed, exc.strerror or str(exc)) from exc
    return path


def replaceable_file(path: str | None, flag: str) -> str | None:
    """A file a long run replaces again and again (the safety ledger: a temporary file beside it renamed over it),
    checked at its start: not a folder, in an existing folder this process can create files in. The file itself
    need not exist (a first start), nor be readable (it is replaced, and what cannot be read is the reader's to
    judge)."""
    if path is not None:
        _file_in_folder(path, flag, "write in", writable=True)
    return path


def stop_file(path: str | None, flag: str) -> str | None:
    """A file whose existence stops every action (the operator's emergency stop), checked at start. The file need
    not exist, but its folder must, and this process must be able to look in it: a path in a missing folder (a
    typo, a volume not mounted) is a file the operator can never create where the controller looks, so the stop
    would silently never take; one the controller cannot look in raised on every cycle; a folder there stopped
    every action for good."""
    if path is not None:
        _file_in_folder(path, flag, "look in", writable=False)
    return path


def watched_file(path: str | None, flag: str) -> str | None:
    """A file a long run reads again and again, which need not exist yet, nor its folder (the exporter's power caps:
    none until written, and /run/gputide is emptied at each boot until the writer makes it again), checked at start
    for what can never be read: a folder there ('unreadable' at every read), a path under a file, or under a folder
    this process cannot look in. A missing folder is the caller's to warn of: refusing it stopped the README's
    exporter on every fresh host."""
    if not path:
        return path
    allowed = "a file path, not a folder, under folders this process can look in (the file and its folder need " \
              "not exist yet)"
    target = Path(path)
    try:
        if target.is_dir():
            raise InputError(None, flag, path, allowed, "a folder")
        above = next((p for p in target.parents if p.exists()), None)   # the nearest that exists: / at worst
        if above is not None and not above.is_dir():
            raise InputError(None, flag, path, allowed, f"under a file, not a folder ({above})")
    except OSError as exc:   # EACCES: a folder on the way this process cannot look in
        raise InputError(None, flag, path, allowed, exc.strerror or str(exc)) from exc
    return path


def _file_in_folder(path: str, flag: str, can: str, *, writable: bool) -> None:
    """InputError unless `path` is no folder and its folder exists, this process can look in it (stat() of a path
    in a folder it cannot search raises EACCES) and, when `writable`, create a file there."""
    allowed = f"a file path in an existing folder this process can {can} (the file itself need not exist)"
    target = Path(path)
    try:
        if not target.parent.is_dir():
            raise InputError(None, flag, path, allowed, "no such folder" if not target.parent.exists()
                             else "under a file, not a folder")
        if target.is_dir():
            raise InputError(None, flag, path, allowed, "a folder")
        if writable:
            with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".gputide-probe-"):
                pass
    except OSError as exc:   # EACCES, EROFS
        raise InputError(None, flag, path, allowed, exc.strerror or str(exc)) from exc


def kubeconfig_file(path: str | None, flag: str = "--kubeconfig") -> str | None:
    """A kubeconfig given on the command line, read as the Kubernetes client reads it (UTF-8 YAML, a mapping that
    names its current-context): what the client would raise as a traceback (UnicodeDecodeError, a YAML error,
    IsADirectoryError, a TypeError on a list) is one line naming the file. None (in-cluster or the client's own
    defaults) is left to the client."""
    if path is None:
        return None
    problem = _kubeconfig_problem(path)
    if problem:
        raise InputError(path, flag, path, "a kubeconfig file: UTF-8 YAML naming its current-context", problem)
    return path


def _kubeconfig_problem(path: str) -> str:
    try:
        doc = yaml.load(Path(path).read_bytes().decode("utf-8"), BoundedLoader)  # noqa: S506 (a SafeLoader)
    except AliasBomb as exc:
        return f"aliases that expand to {exc.expanded} values (at most {MAX_ALIASED_VALUES})"
    except RecursionError:
        return "nested too deeply to read"
    except IsADirectoryError:
        return "a folder"
    except OSError as exc:
        return exc.strerror or str(exc)
    except UnicodeDecodeError as exc:
        return f"not UTF-8: byte {exc.object[exc.start]:#04x} at offset {exc.start}"
    except yaml.YAMLError as exc:
        return f"not YAML: {' '.join(str(exc).split())}"
    if doc is None:
        return "empty"
    if not isinstance(doc, dict):
        return f"a YAML {type(doc).__name__}, not a mapping"
    if not isinstance(doc.get("current-context"), str) or not doc["current-context"]:
        return "no current-context"
    return ""


def kube_client(kubeconfig: str | None, allowed: str = "a usable Kubernetes configuration"):
    """An API client from `kubeconfig` (else in-cluster, $KUBECONFIG, ~/.kube/config); none found, or one the client
    cannot read (not UTF-8, not YAML, a folder, no current-context, bad certificate data) is bad input naming
    --kubeconfig (exit 2), not a traceback."""
    from balancer.actuate.kubernetes import build_api_client
    from balancer.errors import ActuationError

    kubeconfig_file(kubeconfig)
    try:
        return build_api_client(kubeconfig)
    except ActuationError as exc:
        detail = str(exc)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, yaml.YAMLError) as exc:
        # the client's loader reads $KUBECONFIG / ~/.kube/config unchecked and raises whatever its parts do
        detail = f"{type(exc).__name__}: {exc}"
    raise InputError(kubeconfig, "--kubeconfig", kubeconfig or "(in-cluster, $KUBECONFIG, ~/.kube/config)",
                     allowed, detail=detail)


_NEGATIVE = re.compile(r"-\.?\d")   # -1h, -30s, -.5: a negative value, not an option


class NegativeValues(argparse.ArgumentParser):
    """A parser that reads `--horizons -1h` as the value -1h of --horizons. argparse takes a word that starts with
    `-` and is not a plain negative number (`-1` is one, `-1h` is not) for an option, so the flag 'expected one
    argument' and the value was an unrecognised option: the check that would name the flag, the value and what
    is allowed (exit 2) never ran. Here such a word right after an option that takes one value is joined to it
    (`--horizons=-1h`, which argparse reads as a value), and the command's own check refuses it."""

    def parse_known_args(self, args=None, namespace=None):   # noqa: ANN001, ANN201 - argparse's signature
        import sys

        words = list(sys.argv[1:] if args is None else args)
        takes_one = {s for a in self._actions if a.option_strings and a.nargs is None for s in a.option_strings}
        out: list[str] = []
        i = 0
        while i < len(words):
            word = words[i]
            if word == "--":
                out += words[i:]
                break
            if word in takes_one and i + 1 < len(words) and _NEGATIVE.match(words[i + 1]):
                out.append(f"{word}={words[i + 1]}")
                i += 2
                continue
            out.append(word)
            i += 1
        try:
            return super().parse_known_args(out, namespace)
        except InputError as exc:   # a `type=` check (`given`): one line and exit 2, as the commands' own checks
            self.exit(EXIT_INPUT_ERROR, f"gputide: error: {exc}\n")


LISTEN_ENV = "GPUTIDE_LISTEN_ADDRESS"
LISTEN_HELP = (f"address to bind (default ${LISTEN_ENV}, else ::, every address, IPv6 and IPv4, or 0.0.0.0 where this "
               "kernel has no IPv6; :: or [::] takes IPv4 too, 0.0.0.0 is IPv4 alone, an IPv6 address such as ::1 "
               "IPv6 alone)")
IPV4_ANY, IPV6_ANY = "0.0.0.0", "::"


def add_listen_address(p: argparse.ArgumentParser, *aliases: str, dest: str = "listen_address") -> None:
    """`--listen-address` for a command that serves HTTP (metrics, probes), by default `$GPUTIDE_LISTEN_ADDRESS`: one
    setting for every gputide container of a pod (deploy/components/listen-address puts it in each container's
    environment, which a kustomize patch of the containers' args could not reach in a DaemonSet whose containers
    depend on the overlay). Neither given, None: `bind` serves on every address. An empty value, bracketed or not,
    is refused as the line is read (`listen_address`; argparse checks a default as it checks a value given)."""
    p.add_argument("--listen-address", *aliases, dest=dest, default=os.environ.get(LISTEN_ENV), help=LISTEN_HELP,
                   type=listen_address)


def listen_address(text: str) -> str:
    """argparse `type=` for `--listen-address`: refused when empty once its brackets are taken off (`[]` too), as the
    server takes them off (exporters.server.serve_app) and socketserver reads "" as every IPv4 address: `""` (an
    unset variable in a manifest) or `[]` served on every IPv4 address without a word. The same for an empty
    $GPUTIDE_LISTEN_ADDRESS: refused, not ignored, for it is set only to choose an address (the ConfigMap of
    deploy/components/listen-address), and guessing one (every address) could serve where its operator meant not
    to."""
    if not text.strip().removeprefix("[").removesuffix("]").strip():
        raise InputError(None, "--listen-address", text, f"an address of this machine such as ::, 0.0.0.0 or "
                         f"127.0.0.1 (also from ${LISTEN_ENV}), not empty (leave it out for every address)")
    return text


def host_port(addr: str, port: int) -> str:
    """`addr:port` as a URL writes it: an IPv6 address bracketed (`[::]:9400`, not `:::9400`)."""
    host = addr.removeprefix("[").removesuffix("]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind(serve, addr: str | None, port: int, port_flag: str = "--port", **kw):
    """`serve(..., port=, addr=)`; `addr` None (no --listen-address) is `::`, which the server binds with IPV6_V6ONLY
    off (exporters.server) so that it takes IPv4 too whatever net.ipv6.bindv6only says, and 0.0.0.0 where `::`
    cannot be bound (a kernel without IPv6, IPv6 off in the pod's network). An address this machine does not have,
    or a port in use or reserved, is an InputError naming both flags, not an OSError traceback."""
    chosen = IPV6_ANY if addr is None else addr
    try:
        try:
            return serve(port=port, addr=chosen, **kw)
        except OSError as exc:
            if addr is not None or exc.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                raise   # a port in use on :: is in use on 0.0.0.0 too
            chosen = IPV4_ANY
            return serve(port=port, addr=chosen, **kw)
    except OSError as exc:
        raise InputError(None, f"--listen-address/{port_flag}", host_port(chosen, port),
                         "an address of this machine and a free port (0: any free one)", str(exc)) from exc
