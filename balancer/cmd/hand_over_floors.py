"""`gputide hand-over-floors`: hands the HPA floors and gputide-replicas entries one controller wrote over to another.

    gputide hand-over-floors FROM TO [--namespace gputide] [--kubeconfig PATH] [--dry-run]

FROM and TO are controllers' Leases (gputide-controller, a shard's gputide-controller-a), both in --namespace; a
writer is recorded as NAMESPACE/LEASE. A controller gives back only what names it as its writer (an HPA's
gputide.io/floor-owner, a gputide-replicas entry's "owner": balancer/actuate/k8s_hpa.py `owned_by`), so what a
controller that no longer runs wrote is no one's: a floor whose service later leaves gputide's management stays raised
for good. Handed over, TO gives it back then; the floor itself, and the count the entry keeps, do not change. Used
when switching between the unsharded controller and the shards (deploy/overlays/sharded/kustomization.yaml).

Only what names NAMESPACE/FROM changes: another controller's floors and entries (another namespace's Lease of the same
name included) and unnamed ones (which any controller gives back already) stay as they are. Refused (exit 1) while a
controller may still run as NAMESPACE/FROM: running, it would go on writing its own name. That is a Deployment, of any
name in any namespace, one of whose containers (its containers, its native sidecars, initContainers with restartPolicy
Always, and its plain initContainers: one with no --once never ends, the controller running there for good and its pod
never starting; one with --once runs at each start of one of its pods) is a `gputide run` (one with --dry-run writes
none: not it, its Lease held with --leader-elect refusing by itself) that works that Lease out from its args as the
controller does (--lease-name, --shard, --lease-namespace, else its POD_NAMESPACE, else the namespace its
service-account namespace file names, else gputide: `controller_writers`; the Deployment's namespace where its pod
mounts the token, gputide where it mounts none (automountServiceAccountToken false), either where that is left to its
ServiceAccount; the deepest mount over that file decides (one at /run over /var/run: a symlink to /run in the
image, and on the host where a hostPath of its /var is at /var), the container's own or the ServiceAccount
admission plugin's, which mounts the pod's first volume named kube-api-access-*, of whatever kind, where it has one:
the Deployment's namespace where it gives metadata.namespace there, else any) or cannot be told from them (a $(VAR)
set from a ConfigMap,
a Secret or envFrom in one of those three, such a POD_NAMESPACE, or such a volume over the namespace file: any Lease it
may be, each $(VAR) any text; refused saying which), or the Lease itself held by a holder whose renewal has not expired
by this machine's clock (a controller run some other way). Each HPA is patched at the resourceVersion it was read at and
the record replaced at its own; a write in between (409) is not lost: the object is read again and decided again, as the
controller's own read-modify-writes are (`_Api.update`: up to 4 tries, a short jittered wait between), so a floor or
entry someone wrote meanwhile stands and what no longer names FROM is left; one that names TO after a write this run
tried is counted handed (the write landed, its answer lost, and the client's retry of it got the 409). Only an object
written again before every try fails (exit 1, the others still handed over): run it again.
`--dry-run` reads the same and writes nothing: it prints what a run would hand over now, and says on stderr (exit 0)
when a run would be refused, and why. Bad input (a name that is no Lease's, FROM and TO the same, a bad --namespace or
--kubeconfig) exits 2 naming it. Runs with the operator's rights: list on deployments cluster-wide, get on the Lease
NAMESPACE/FROM, list, get and patch on HPAs cluster-wide, get and update on the gputide-replicas ConfigMap of
--namespace.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import posixpath
import re
import sys
import time
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any, NamedTuple, NoReturn

from balancer.actuate.k8s_deploy_record import RECORD_NAME, Entry, entries, record_body
from balancer.actuate.k8s_hpa import HPA_FLOOR_OWNER_ANNOTATION, floor_owner
from balancer.cmd._args import given, is_k8s_name
from balancer.errors import InputError

Json = dict[str, Any]


# ---- what changes, decided from the API's answers (no calls here) --------------------------------------------------


def floors_of(hpas: Json, writer: str) -> list[Json]:
    """The HPAs (of a cluster-wide list) whose floor names `writer` ("ns/lease") as its writer (`floor_owner`), in
    namespace and name order. Not `owned_by`: that takes unnamed floors too, which are no one's to hand over."""
    named = [h for h in hpas.get("items", []) if floor_owner(h) == writer]
    return sorted(named, key=lambda h: (h["metadata"]["namespace"], h["metadata"]["name"]))


def floor_hand_patch(hpa: Json, to: str) -> Json:
    """The merge patch naming `to` the writer of the HPA's floor, at the resourceVersion read (a write since: 409)."""
    return {"metadata": {"annotations": {HPA_FLOOR_OWNER_ANNOTATION: to},
                         "resourceVersion": hpa["metadata"]["resourceVersion"]}}


def entries_of(record: Json | None, writer: str, to: str) -> dict[str, Entry]:
    """The record's entries (`entries`: hand-edited values left out) that name `writer`, each named `to` instead,
    by key in order; nothing else of them changes."""
    return {key: dataclasses.replace(entry, owner=to) for key, entry in sorted(entries(record).items())
            if entry.owner == writer}


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][-._A-Za-z0-9]*)\)")   # Kubernetes' $(VAR) in a container's args


def _expand(text: str, env: dict[str, str]) -> str:
    """`text` with its $(VAR)s expanded from `env` as the kubelet does ($$ is a "$"); one `env` lacks is left as
    written."""
    return _VAR.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), str(text))


def _container_env(container: Json, namespace: str) -> dict[str, str]:
    """The container's env values that its args can use: literal ones (their $(VAR)s of earlier ones expanded, in
    order, as the kubelet does: LEASE=gputide-controller-$(SHARD) after SHARD=a; no value is "") and the pod's
    namespace (a fieldRef); a value from elsewhere (a ConfigMap, a Secret, another field) is unknown here, its $(VAR)
    left as written. The last entry of a name is the one the kubelet sets: an unknown one after a literal one
    (SHARD=a, then SHARD from a ConfigMap) makes the name unknown; it was read as the literal's, a
    --shard=$(SHARD) controller taken for shard a's alone."""
    out: dict[str, str] = {}
    for var in container.get("env") or []:
        name = var.get("name", "")
        if "valueFrom" not in var:
            out[name] = _expand(var.get("value") or "", out)
        elif ((var["valueFrom"] or {}).get("fieldRef") or {}).get("fieldPath") == "metadata.namespace":
            out[name] = namespace
        else:
            out.pop(name, None)
    return out


class _NotRun(Exception):
    """Args the `run` parser refuses: the controller would exit 2 on them, so they run no controller."""


_LEASE_DESTS = ("lease_name", "lease_namespace", "shard")   # `gputide run`'s args that name its Lease


@functools.cache
def _run_parser() -> argparse.ArgumentParser:
    """`gputide run`'s own parser (`balancer.cmd.run.register`), quiet: an error or --help raises `_NotRun` instead
    of printing and exiting. Its type checks skip a value with a $(VAR) in it (`_unless_var`): the kubelet fills it
    from outside the args (a ConfigMap, a Secret, envFrom), left unexpanded here, and `--metrics-port=$(PORT)`
    failing int() judged a running controller to run none; any other value is checked as the controller checks it
    (--metrics-port=abc or --policy= exits 2: a crash loop runs no controller). --listen-address's default is not
    this machine's $GPUTIDE_LISTEN_ADDRESS (an empty one here refused every Deployment's args): it is the
    container's (`_run_args`)."""
    from balancer.cmd import run as run_cmd
    from balancer.cmd._args import NegativeValues

    class Quiet(NegativeValues):
        def error(self, message: str) -> NoReturn:
            raise _NotRun(message)

        def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
            raise _NotRun(message or "")

        def print_help(self, file: Any = None) -> None:
            pass

    sub = argparse.ArgumentParser(prog="gputide").add_subparsers(parser_class=Quiet)
    run_cmd.register(sub)
    parser = sub.choices["run"]
    for action in parser._actions:
        if action.type is not None:
            action.type = _unless_var(action.type)
        if action.dest not in _LEASE_DESTS:
            action.choices = None
        if action.dest == "listen_address":
            action.default = None
    return parser


def _unless_var(check: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse `type=` `check`, skipped for a value with a $(VAR) the kubelet fills (left as written)."""
    return lambda text: text if "$(" in text else check(text)


def _run_args(tokens: list[str], env: dict[str, str]) -> argparse.Namespace | None:
    """`gputide run`'s args among `tokens` (a container's command and args, after the first "run"), read by its own
    parser as the controller reads them (abbreviations such as --shar=a or --prom= included, the last of a flag given
    twice); None when they run no `gputide run`: no "run", or args that parser refuses (no --prometheus, which it
    requires: `npm run start` is not one; the controller would exit 2 on them), or no --listen-address and the
    container's `env` (`_container_env`) sets $GPUTIDE_LISTEN_ADDRESS to one it refuses (empty)."""
    from balancer.cmd._args import LISTEN_ENV, listen_address

    if "run" not in tokens:
        return None
    try:
        args = _run_parser().parse_known_args(tokens[tokens.index("run") + 1:])[0]
        if args.listen_address is None and LISTEN_ENV in env:
            _unless_var(listen_address)(env[LISTEN_ENV])
    except (_NotRun, InputError):
        return None
    return args


class Elects(NamedTuple):
    """The writers ("ns/lease") one `gputide run` container may run as, and why more than one or one not told (a
    $(VAR) part), "" when its args and env tell it alone; where it runs, where not as the pod's container or native
    sidecar (a plain initContainer's, `_init_run`); `running_on` says them as it refuses."""

    writers: tuple[str, ...]
    why: str = ""
    where: str = ""


_ARGS_FROM_OUTSIDE = ("its --shard, --lease-name or --lease-namespace takes a $(VAR) set from outside its args: a "
                      "ConfigMap, a Secret, envFrom")


def controller_writers(deployment: Json) -> list[Elects]:
    """The writers ("ns/lease", `balancer.cmd.run.floor_owner`) each `gputide run` container (or initContainer) of
    `deployment` may run as, an `Elects` a container, as the controller works its own out from its args (read by
    `gputide run`'s own parser, `_run_args`): --lease-name (default gputide-controller), -NAME with --shard NAME, in
    --lease-namespace, else the pod's own (`_own_namespaces`: POD_NAMESPACE, else the namespace its service-account
    namespace file names, else gputide). Its $(VAR)s expanded as the kubelet does; one whose value this cannot know
    (a ConfigMap's, a Secret's, envFrom's) is left as written, so a writer's $(VAR) is a part that cannot be told
    (`running_on` takes it for any text). What ties a Deployment to a Lease: its name need not be the Lease's. Its
    containers, its native sidecars (initContainers with restartPolicy Always, which run beside them; a sidecar
    controller was missed) and its plain initContainers (`_init_run`) are read. One with --dry-run writes no floor
    and no entry (its actuator is the DryRunActuator, with no floor owner): a preflight initContainer `gputide run
    --once --dry-run` refused a hand-over as a writer. With --leader-elect it holds the Lease still, under which
    `running_on` refuses by itself."""
    from balancer.telemetry.shard import ShardSelector

    meta = deployment.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    pod = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    out = []
    inits = [(c, c.get("restartPolicy") != "Always") for c in pod.get("initContainers") or []]   # True: a plain one
    for container, plain in [*inits, *((c, False) for c in pod.get("containers") or [])]:
        env = _container_env(container, namespace)
        tokens = [*(container.get("command") or []), *(container.get("args") or [])]
        args = _run_args([_expand(t, env) for t in tokens], env)
        if args is None or args.dry_run:   # --dry-run: a DryRunActuator, no floor or entry written
            continue
        lease = ShardSelector(args.shard).lease_name(args.lease_name) if args.shard else args.lease_name
        spaces, why = (((args.lease_namespace,), "") if args.lease_namespace
                       else _own_namespaces(pod, container, env, namespace))
        if "$(" in lease + (args.lease_namespace or ""):
            why = "; ".join(filter(None, (_ARGS_FROM_OUTSIDE, why)))
        out.append(Elects(tuple(f"{ns}/{lease}" for ns in spaces), why,
                          _init_run(container.get("name"), args.once) if plain else ""))
    return out


def _init_run(name: str | None, once: bool) -> str:
    """Where a plain initContainer (no restartPolicy Always) `name` runs `gputide run`, as `running_on` says it. The
    pod's containers start once each initContainer has ended: with no --once the controller never ends, so it runs
    there for good, electing and writing, and the pod never starts; with --once it runs one reconcile cycle at each
    start of one of the Deployment's pods (a rollout, a pod rescheduled or evicted), writing as its Lease then. Either
    goes on writing its own name: such a Deployment was not read, and a hand-over went ahead under it."""
    return (f" in its initContainer {name}, " + ("once at each start of one of its pods (`gputide run --once`)"
                                                 if once else "for good (`gputide run` with no --once never ends, "
                                                 "so its pod's containers never start)"))


def _own_namespaces(pod: Json, container: Json, env: dict[str, str], namespace: str) -> tuple[tuple[str, ...], str]:
    """(the namespaces `gputide run` may take for its own in `container`, `balancer.cmd.run.own_namespace`; why
    more than one or one not told, else ""): its POD_NAMESPACE where set and not blank: the value known here
    (`_container_env`), "$(POD_NAMESPACE)", a part that cannot be told, where its last entry takes it from a
    ConfigMap, a Secret or another field, or where it may come from envFrom (an env entry wins over envFrom); else the
    namespace file's (`_namespace_file`). It was read as unset in those cases, so a controller whose POD_NAMESPACE
    points elsewhere was looked for in its Deployment's namespace and missed."""
    if any(var.get("name") == "POD_NAMESPACE" for var in container.get("env") or []):
        told = env.get("POD_NAMESPACE", "$(POD_NAMESPACE)").strip()
        if told:
            return (told,), "" if "$(" not in told else "its POD_NAMESPACE takes a value set from outside its " \
                                                        "args: a ConfigMap, a Secret, another field"
    elif container.get("envFrom"):
        return ("$(POD_NAMESPACE)",), "its POD_NAMESPACE may be set by envFrom"
    return _namespace_file(pod, container, namespace)


_ANY_FILE = "$(namespace file)"   # what a volume over the namespace file may name: any namespace, as a $(VAR) is
TOKEN_VOLUME_PREFIX = "kube-api-access-"   # the ServiceAccount admission plugin's token volume is named so
_PLUGIN_TOKEN = {"name": TOKEN_VOLUME_PREFIX + "(added)", "projected": {"sources": [   # the one it adds
    {"serviceAccountToken": {"path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}


def _namespace_file(pod: Json, container: Json, namespace: str) -> tuple[tuple[str, ...], str]:
    """(what `gputide run` takes for its namespace with no POD_NAMESPACE, why more than one or one not told): the one
    its service-account namespace file names, else gputide, its fallback. The file is the token's where the pod
    mounts the token (automountServiceAccountToken: true), none (gputide) where it does not (false), either where the
    pod leaves that to its ServiceAccount (not read here: the operator's rights hold no get on ServiceAccounts), so a
    hand-over of gputide's Lease waits for such a controller in any namespace. The token is what the ServiceAccount
    admission plugin mounts (`_token_mount`): the pod's first volume named kube-api-access-*, whatever it is, where it
    has one (a spec copied from a running pod), else its own projected one (the Deployment's namespace). It was taken
    for the plugin's own always: a ConfigMap named kube-api-access-x, which the plugin mounts there instead, was read
    as the Deployment's namespace, and a hand-over of the Lease its namespace key names went ahead under it. The
    deepest mount over the file decides, the container's own or the plugin's (`_deepest`: the runtime mounts the
    deeper over the shallower; an emptyDir at /var/run under a mounted token reads the token's; one at /run is over
    /var/run's, the image's /var/run a symlink to /run, and the host's where a hostPath of its /var is mounted at
    /var, `_links`; two at one place, which the plugin's comparing paths as written allows, may each be it): the
    Deployment's namespace where it is a projected (or downwardAPI) volume giving the pod's namespace as that file
    (`_gives_namespace`), as a hand-made token mount does; else any namespace (`_ANY_FILE`, a ConfigMap's, a
    Secret's or a hostPath's file there naming a third one, an emptyDir written by another container)."""
    from balancer.cmd.run import DEFAULT_NAMESPACE, SERVICE_ACCOUNT_NAMESPACE

    file = PurePosixPath(SERVICE_ACCOUNT_NAMESPACE)
    own = list(container.get("volumeMounts") or [])
    pod, token = _token_mount(pod, container, str(file.parent))
    automount = pod.get("automountServiceAccountToken")
    worlds = {True: [[*own, *token]], False: [own]}.get(automount, [[*own, *token], own])
    found = [m for world in worlds for m in (_deepest(pod, world, file) or [None])]   # None: no file, gputide
    head = (f"with no --lease-namespace or POD_NAMESPACE, `gputide run` elects in the namespace that {file} names, "
            "else in gputide")
    odd = next((m for m in found if m is not None and not _gives_namespace(pod, m, file)), None)
    if odd is not None:
        kind = next((k for k in _volume(pod, odd) if k != "name"), "none of the pod's")
        by = "" if any(odd is m for m in own) else (" by the ServiceAccount admission plugin (the pod's first volume "
                                                     f"named {TOKEN_VOLUME_PREFIX}*, where it mounts the token)")
        return (_ANY_FILE,), (f"{head}, and its volume {odd.get('name')} ({kind}) mounted over it at "
                              f"{odd['mountPath']}{by} may put any namespace there")
    if None not in found:
        return (namespace,), ""
    if automount is False:
        return (DEFAULT_NAMESPACE,), f"{head}: its pod mounts no service-account token (automountServiceAccountToken " \
                                     "false)"
    return tuple(dict.fromkeys((namespace, DEFAULT_NAMESPACE))), (
        f"{head}: its pod may mount no service-account token (automountServiceAccountToken left to its "
        "ServiceAccount, not read here)")


def _token_mount(pod: Json, container: Json, at: str) -> tuple[Json, list[Json]]:
    """(`pod`, with the plugin's own token volume where it adds one; the mount the ServiceAccount admission plugin
    gives `container` at `at` where the pod mounts the token, [] where it gives none): the pod's first volume named
    kube-api-access-* (of whatever kind) where it has one, else its own (`_PLUGIN_TOKEN`); none to a container with a
    mount at `at` as written (the plugin compares the path as written: `at/`, //var/run/... and /run/... are not
    it, each mounted beside its own)."""
    if any(m.get("mountPath") == at for m in container.get("volumeMounts") or []):
        return pod, []
    volumes = pod.get("volumes") or []
    volume = next((v for v in volumes if str(v.get("name") or "").startswith(TOKEN_VOLUME_PREFIX)), None)
    if volume is None:
        volume, pod = _PLUGIN_TOKEN, {**pod, "volumes": [*volumes, _PLUGIN_TOKEN]}
    return pod, [{"name": volume["name"], "mountPath": at, "readOnly": True}]


def _deepest(pod: Json, mounts: list[Json], file: PurePosixPath) -> list[Json]:
    """The ones of `mounts` (`pod`'s container's) over `file` (the file itself or a folder above it) that may be the
    one read there ([] if none): the runtime mounts them in the order of their cleaned paths' depth as written, a later
    one over an earlier one, so the last is the deepest as written; those of the deepest place in the container (/run
    read as /var/run, `_mount_path`, where /var/run may be the symlink to /run: `_links`) are taken too, and each of a
    depth tied (their order there is not read here): one too many refuses a hand-over, one missed lets it go ahead
    under a controller."""
    out: list[Json] = []
    for linked in _links(pod, mounts):
        where = _mount_path if linked else _cleaned
        over = [m for m in mounts if where(m) in (file, *file.parents)]
        last = [max((len(at(m).parts) for m in over), default=0) for at in (where, _cleaned)]
        out += [m for m in over if (len(where(m).parts) == last[0] or len(_cleaned(m).parts) == last[1])
                and not any(m is o for o in out)]
    return out


def _links(pod: Json, mounts: list[Json]) -> tuple[bool, ...]:
    """Whether the container's /var/run may be a symlink to /run (True) and whether it may be none (False), as
    `mounts` leave the image's: a mount at /var (or /) hides it, the deepest of them deciding (the runtime mounts it
    last); a hostPath of the host's own /var (or /) mounted there (`_host_own`, its subPath joined) brings the
    host's /var/run, on a systemd host (every current distribution) the symlink to /run, which the runtime and the
    controller follow inside the container, so both may be (a host with /var/run a folder of its own gives its own
    files). Taken for hiding it, a ConfigMap at /run/secrets/kubernetes.io/serviceaccount beside the admission
    plugin's token in such a pod was over no file: the controller taken for its Deployment's namespace's alone,
    while it may read the ConfigMap's (a hostPath /var at /host/var is no mount at /var: it changes nothing here)."""
    hides = [m for m in mounts if _cleaned(m) in _HIDES_RUN]
    if not hides:
        return (True,)
    top = max(len(_cleaned(m).parts) for m in hides)
    host = any(len(_cleaned(m).parts) == top and _host_own(pod, m) for m in hides)
    return (False, True) if host else (False,)


def _host_own(pod: Json, mount: Json) -> bool:
    """Whether `mount` may show the host's own folder at the same place: a hostPath whose path and `mount`'s subPath
    joined (cleaned as the kubelet resolves them) are `mount`'s own path, as the host's / with subPath var at /var
    is its /var; with a subPathExpr (expanded on the node, from the container's env: not read here) one whose path
    is that path or a folder above it may be, so both views are judged (it only adds refusals). Read as hiding the
    symlink whatever its subPath, the host's / with subPath var at /var was, and a ConfigMap at
    /run/secrets/kubernetes.io/serviceaccount beside the token was over no file: a hand-over went ahead under a
    controller that may read the ConfigMap's namespace."""
    path = str((_volume(pod, mount).get("hostPath") or {}).get("path") or "")
    if not path:
        return False
    at = _cleaned(mount)
    if mount.get("subPathExpr"):
        host = _host_path(path)
        return host == at or host in at.parents
    return _host_path(f"{path}/{mount.get('subPath') or ''}") == at


def _host_path(path: str) -> PurePosixPath:
    """`path` on the host cleaned as the kubelet resolves it ("//var/" and "/./var" are /var)."""
    return PurePosixPath(posixpath.normpath("/" + path.lstrip("/")))


_RUN, _VAR_RUN = PurePosixPath("/run"), PurePosixPath("/var/run")
_HIDES_RUN = (PurePosixPath("/"), PurePosixPath("/var"))   # a mount here hides the image's /var/run symlink


def _mount_path(mount: Json) -> PurePosixPath:
    """Where `mount` lands in the container: its mountPath cleaned as the runtime cleans it (`_cleaned`), one under
    /run read as under /var/run: the controller opens /var/run/secrets/kubernetes.io/serviceaccount/namespace, and in
    the shipped image (python:3.11-slim-bookworm; Alpine's and distroless too) /var/run is a symlink to /run, which the
    runtime follows as it mounts. Read as written, a projected token at /run/secrets/kubernetes.io/serviceaccount (in a
    pod that mounts none itself) was over no file, and the controller it makes elect in its pod's namespace was taken
    for gputide's alone; a ConfigMap there naming a third namespace was missed too. Written for the shipped image: in
    one with /var/run a folder of its own the /run mount is over no file, and one taken for over it may hide the mount
    that is (a ConfigMap at /var/run/secrets under a token at /run/...: the token is read here, the ConfigMap there)."""
    at = _cleaned(mount)
    return _VAR_RUN.joinpath(at.relative_to(_RUN)) if at.is_relative_to(_RUN) else at


def _cleaned(mount: Json) -> PurePosixPath:
    """`mount`'s mountPath cleaned as the runtime cleans it (Go's filepath.Clean under the container's root: "//var/run"
    and "/var/run/x/.." are /var/run, which the API leaves as written); "." (over no file) where it has none. Read as
    written, a token mounted at //var/run/secrets/... was over no file, and the controller it makes elect in its pod's
    namespace was taken for gputide's alone."""
    text = str(mount.get("mountPath") or "")
    return PurePosixPath(posixpath.normpath("/" + text.lstrip("/"))) if text else PurePosixPath(".")


def _volume(pod: Json, mount: Json) -> Json:
    """The volume of `pod` that `mount` mounts ({} where none is named so)."""
    return next((v for v in pod.get("volumes") or [] if v.get("name") == mount.get("name")), {})


def _gives_namespace(pod: Json, mount: Json, file: PurePosixPath) -> bool:
    """Whether `mount` (a container's volumeMount over `file`) is a projected or downwardAPI volume of `pod` that
    writes the pod's namespace (metadata.namespace) at `file`, and nothing else there: a projected ConfigMap or
    Secret source listing no items writes each of its keys, a `namespace` key over the item (the later source's
    wins), so it may name any (the API refuses two items of one path)."""
    if mount.get("subPath") or mount.get("subPathExpr") or file == _mount_path(mount):
        return False
    at = file.relative_to(_mount_path(mount))
    volume = _volume(pod, mount)
    sources = (volume.get("projected") or {}).get("sources") or []
    if len(at.parts) == 1 and any(k in s and not (s[k] or {}).get("items") for s in sources for k in _ALL_KEYS):
        return False
    downward = [s.get("downwardAPI") or {} for s in sources]
    return any(PurePosixPath(item.get("path") or ".") == at
               and (item.get("fieldRef") or {}).get("fieldPath") == "metadata.namespace"
               for source in [*downward, volume.get("downwardAPI") or {}] for item in source.get("items") or [])


_ALL_KEYS = ("configMap", "secret")   # projected sources that write each key where they list no items


def running_on(deployments: Json, lease: Json | None, writer: str, now: float) -> list[str]:
    """Why a controller may still write as `writer` ("ns/lease"), one line each; [] when none seems to: a Deployment
    of a `gputide run` that works its Lease out to be it (`controller_writers`, whatever the Deployment's name; or
    one of two, where its pod may mount no service-account token) or whose Lease cannot be told but may be it (a
    $(VAR) unknown here left in --shard, --lease-name or --lease-namespace, or in its namespace: `may_be`), each
    saying why as its namespace was judged (`Elects.why`), and the Lease itself held by a holder whose renewal has not
    expired by `now` (this machine's clock; a controller run some other way, a StatefulSet or a bare pod, holds it
    too)."""
    why = []
    for d in deployments.get("items", []):
        where, found = f"deployment/{d['metadata']['name']} in {d['metadata']['namespace']}", controller_writers(d)
        told = [e for e in found if writer in e.writers]
        untold = [e for e in found if any("$(" in w and may_be(w, writer) for w in e.writers)]
        if told:
            why.append(f"{where} runs a controller{told[0].where} on Lease {_leases(told[0])}")
        elif untold:
            why.append(f"{where} runs a controller{untold[0].where} on Lease {' or '.join(untold[0].writers)}, which "
                       f"cannot be told here ({untold[0].why}), so it may be {writer}")
    spec = (lease or {}).get("spec") or {}
    holder, renewed = spec.get("holderIdentity"), _seconds(spec.get("renewTime") or spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    expires = None if renewed is None or duration is None else renewed + float(duration)
    if holder and (expires is None or expires > now):
        why.append(f"Lease {writer} is held by {holder}" + ("" if expires is None else
                                                              f" for {expires - now:.0f} s more unless renewed"))
    return why


def _leases(elects: Elects) -> str:
    """A container's writers as `running_on` says them, with why where its namespace was not told alone (two where
    its pod may mount no service-account token; gputide where it mounts none), as it was judged: a volume over the
    namespace file was said to be a token not mounted."""
    return " or ".join(elects.writers) + (f" ({elects.why})" if elects.why else "")


def may_be(told: str, writer: str) -> bool:
    """Whether `told` ("ns/lease" as `controller_writers` works it out, a $(VAR) unknown here left in it) may be
    `writer`: each $(VAR) any text, the rest as written. team-b/gputide-controller-$(SHARD) is no gputide/... writer,
    nor gputide/gputide-controller (its "-" is written): only what it may be refuses a hand-over."""
    return re.fullmatch(".*".join(map(re.escape, re.split(r"\$\([^)]*\)", told))), writer) is not None


def _seconds(stamp: str | None) -> float | None:
    """A Lease's MicroTime ("2026-12-07T04:20:56.123456Z") as epoch seconds; None when absent or unreadable."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp() if stamp else None
    except ValueError:
        return None


# ---- the command ----------------------------------------------------------------------------------------------------


def _names(args: argparse.Namespace) -> tuple[str, str, str]:
    """(namespace, FROM, TO) as given, or bad input naming the argument."""
    for field, value in (("FROM", args.from_lease), ("TO", args.to_lease)):
        if "/" in value:
            raise InputError(None, field, value, "a Lease's name alone, such as gputide-controller (its namespace "
                                                 "is --namespace)")
        if not is_k8s_name(value):
            raise InputError(None, field, value, "a controller's Lease name (lower-case letters, digits, '-' and "
                                                 "'.'), such as gputide-controller or gputide-controller-a")
    if args.to_lease == args.from_lease:
        raise InputError(None, "TO", args.to_lease, "another controller's Lease than FROM's")
    if not is_k8s_name(args.namespace, "label"):
        raise InputError(None, "--namespace", args.namespace, "a namespace's name (lower-case letters, digits and '-', "
                                                              "at most 63), the controllers' Leases'")
    return args.namespace, args.from_lease, args.to_lease


def run(args: argparse.Namespace) -> int:
    from balancer.actuate.kubernetes import _Api
    from balancer.cmd._args import kube_client
    from balancer.errors import ActuationError

    ns, from_lease, to_lease = _names(args)
    api = _Api(kube_client(args.kubeconfig), 3, 0.5, time.sleep, 10.0)
    try:
        return _hand_over(api, ns, from_lease, to_lease, args.dry_run)
    except ActuationError as exc:   # a read refused (403), the API server not answering
        print(f"gputide: hand-over-floors: {exc}: nothing more handed over", file=sys.stderr)
        return 1


def _hand_over(api: Any, ns: str, from_lease: str, to_lease: str, dry_run: bool) -> int:
    """Hands NS/FROM's floors and entries to NS/TO (or, `dry_run`, says which it would): 0, or 1 when refused or
    when a write failed (each said on stderr)."""
    from balancer.actuate.kubernetes import NotFoundError

    writer, heir = f"{ns}/{from_lease}", f"{ns}/{to_lease}"
    deployments = api("list Deployments", api.apps.list_deployment_for_all_namespaces)
    try:
        lease = api(f"lease {writer}", api.coordination.read_namespaced_lease, from_lease, ns)
    except NotFoundError:
        lease = None
    running = running_on(deployments, lease, writer, time.time())
    for why in running:
        print(f"gputide: hand-over-floors: {why}: " + (
            "a run now would be refused (stop it first)" if dry_run else "stop it first, and wait for it to go "
            "(deploy/overlays/sharded/kustomization.yaml says how)"), file=sys.stderr)
    if running and not dry_run:
        return 1
    verb = "would be handed" if dry_run else "handed"
    hpas, failed = _hand_floors(api, writer, heir, dry_run), False
    for hpa in hpas:
        meta = hpa["metadata"]
        if "failed" in hpa:
            print(f"gputide: hand-over-floors: {hpa['failed']}", file=sys.stderr)
            failed = True
        else:
            print(f"hpa {meta['namespace']}/{meta['name']}: floor {verb} from {writer} to {heir}")
    handed, problem = _hand_entries(api, ns, writer, heir, dry_run)
    for key in handed:
        print(f"configmap {ns}/{RECORD_NAME} {key}: entry {verb} from {writer} to {heir}")
    if problem:
        print(f"gputide: hand-over-floors: {problem}", file=sys.stderr)
    floors = sum("failed" not in h for h in hpas)
    print(f"{'would hand' if dry_run else 'handed'} from {writer} to {heir}: {floors} HPA floor(s), {len(handed)} "
          f"{RECORD_NAME} entr{'y' if len(handed) == 1 else 'ies'}")
    return 1 if failed or problem else 0


def _hand_floors(api: Any, writer: str, heir: str, dry_run: bool) -> list[Json]:
    """The HPAs whose floor names `writer`, each patched to name `heir` (not with `dry_run`); one whose patch failed
    carries "failed": why. A write since it was read (409) reads it again and decides again (`_Api.update`): one
    deleted since is left out, and so is one that then no longer names `writer`, unless it names `heir` after a write
    this run tried (the patch landed, its answer lost, and `_Api`'s retry got the 409): that one is counted handed."""
    from balancer.actuate.k8s_hpa import FIELD_MANAGER
    from balancer.actuate.kubernetes import MERGE_PATCH, ConflictError, NotFoundError
    from balancer.errors import ActuationError

    def hand(hpa: Json) -> Json | None:
        """`hpa` handed over (as listed), None when nothing was to hand, or it with "failed"."""
        hns, name = hpa["metadata"]["namespace"], hpa["metadata"]["name"]
        what, first = f"hpa {hns}/{name}", [hpa]   # the first try at the listed object: no GET unless a 409
        seen: list[Json] = []   # the object as each try read it: a try after the first follows a write this run tried

        def read() -> Json:
            return first.pop() if first else api(what, api.autoscaling.read_namespaced_horizontal_pod_autoscaler,
                                                 name, hns)

        def decide(now: Json) -> Json | None:
            seen.append(now)
            return floor_hand_patch(now, heir) if floor_owner(now) == writer else None
        try:
            patched = api.update(
                what, read, lambda body: api(what, api.autoscaling.patch_namespaced_horizontal_pod_autoscaler, name,
                                             hns, body, _content_type=MERGE_PATCH, field_manager=FIELD_MANAGER),
                decide)
        except NotFoundError:
            return None   # deleted since the list: no floor left to hand over
        except ConflictError as exc:
            return {**hpa, "failed": f"{exc}: written again before each of {api.max_retries + 1} tries, not handed "
                                     "over: run it again"}
        except ActuationError as exc:
            return {**hpa, "failed": f"{exc}: not handed over"}
        # None: no longer `writer`'s when read again; but `heir`'s after a write this run tried is this run's: a
        # patch whose answer was lost (a timeout) landed, and its retry by `_Api` at the old resourceVersion got a 409
        landed = len(seen) > 1 and floor_owner(seen[-1]) == heir
        return hpa if patched is not None or landed else None

    listed = api("list HPAs", api.autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces)
    found = floors_of(listed, writer)
    return found if dry_run else [h for h in map(hand, found) if h is not None]


def _hand_entries(api: Any, ns: str, writer: str, heir: str, dry_run: bool) -> tuple[list[str], str]:
    """(the record keys whose entries named `writer`, now `heir`'s; why none is, or "") for NS's gputide-replicas,
    replaced at the resourceVersion read (not with `dry_run`); a write since (409) reads it again and decides again
    (`_Api.update`), so an entry another writer wrote in between stays."""
    from balancer.actuate.kubernetes import ConflictError, NotFoundError

    what, handed, tried = f"configmap {ns}/{RECORD_NAME}", [], set()   # tried: the keys a write of this run named

    def change(record: Json) -> Json | None:
        changes = entries_of(record, writer, heir)
        # an entry `heir`'s now that a write this run tried named is this run's: a replace whose answer was lost (a
        # timeout) landed, and its retry by `_Api` at the old resourceVersion got a 409
        landed = {key for key, entry in entries(record).items() if key in tried and entry.owner == heir}
        handed[:] = sorted({*changes, *landed})
        tried.update(changes)
        return None if dry_run else record_body(record, ns, RECORD_NAME, changes)
    try:
        api.update(what, lambda: api(what, api.core.read_namespaced_config_map, RECORD_NAME, ns),
                   lambda body: api(what, api.core.replace_namespaced_config_map, RECORD_NAME, ns, body), change)
    except NotFoundError:
        if not handed:
            return [], ""   # no record: nothing to hand over
        return [], f"{what}: deleted since it was read, no entry handed over"
    except ConflictError as exc:
        return [], (f"{exc}: written again before each of {api.max_retries + 1} tries, no entry handed over: run it "
                    "again")
    return handed, ""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("hand-over-floors", help="hand the HPA floors and gputide-replicas entries one "
                                                       "controller wrote over to another (switching to or from shards)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("from_lease", metavar="FROM", help="the Lease of the controller that wrote them (no longer "
                                                      "running), e.g. gputide-controller")
    p.add_argument("to_lease", metavar="TO", help="the Lease of the controller taking them over, e.g. "
                                                  "gputide-controller-a")
    p.add_argument("--namespace", type=given("--namespace", "a namespace"), default="gputide",
                   help="the namespace of both Leases and of the gputide-replicas record (default gputide)")
    p.add_argument("--kubeconfig", type=given("--kubeconfig"), default=None,
                   help="kubeconfig (default: in-cluster, $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--dry-run", action="store_true", help="print what would be handed over, write nothing")
    p.set_defaults(func=run)
