"""Fleet specs: which nodes a (real or simulated) cluster has, with which GPUs, cooling and NVLink islands.

A fleet spec is a small versioned YAML document::

    apiVersion: gputide/v1alpha1
    kind: FleetSpec
    metadata: {name: demo}
    spec:
      nodeGroups:
        - namePrefix: h100-        # nodes are named h100-00, h100-01, ...
          count: 8
          gpuModel: H100-SXM       # a key of balancer.catalog.CATALOGUE (or an Alibaba code such as G2)
          gpusPerNode: 8
          nvlinkDomainSize: 8      # GPUs per NVLink island on the node; 0 = PCIe only
          cpuMilli: 96000
          memoryMiB: 1048576
          site: site-a
          cooling: liquid          # air | liquid
          inletC: 25
          mig: [3g.40gb, 2g.20gb, 2g.20gb]   # optional: every GPU of the group in MIG mode, so partitioned

Validation errors name the file, the field path, the value and what is allowed (`InputError`, exit code 2).
A ``mig`` partition must use profiles the model offers and fit one GPU (`balancer.mig.check_partition`); it is
kept per node in `Fleet.mig` and changes nothing but what the simulated exporter publishes (per GPU instance).
`alibaba_fleet()` turns the Alibaba v2023 node list into the same structures.
"""

from __future__ import annotations

import csv
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from balancer import catalog, mig
from balancer.errors import InputError
from balancer.model import Gpu, Node
from balancer.yamlfile import API_VERSION as API_VERSION  # re-exported: documents name it
from balancer.yamlfile import document_name, expect_kind, read_yaml

_GROUP_FIELDS = {
    "namePrefix": str, "count": int, "gpuModel": str, "gpusPerNode": int, "nvlinkDomainSize": int,
    "cpuMilli": int, "memoryMiB": int, "site": str, "cooling": str, "inletC": (int, float), "pool": str, "mig": list,
}
_COOLING = ("air", "liquid")


@dataclass(frozen=True, slots=True)
class Fleet:
    name: str
    nodes: tuple[Node, ...]
    gpus: tuple[Gpu, ...]
    # node name -> the MIG profiles each of its GPUs is partitioned into (`balancer.mig`); absent: no MIG
    mig: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}), hash=False)

    @property
    def n_gpus(self) -> int:
        return len(self.gpus)


def build(name: str, nodes: Sequence[Node], mig_of: Mapping[str, tuple[str, ...]] | None = None) -> Fleet:
    """Derive the GPUs (stable UUIDs, PCI ids, fleet-wide NVLink island ids) from the nodes; `mig_of`: the MIG
    partition of each node's GPUs, by node name (`Fleet.mig`)."""
    gpus: list[Gpu] = []
    domain = 0
    tag = zlib.crc32(name.encode()) & 0xFFFF
    for node_i, node in enumerate(nodes):
        size = node.nvlink_domain_size if node.nvlink_domain_size > 1 else 0
        for slot in range(node.gpu_count):
            if size and slot % size == 0:
                domain += 1
            gpus.append(Gpu(
                index=len(gpus),
                uuid=f"GPU-{node_i:05x}{slot:03x}-{tag:04x}-4{node_i % 0xFFF:03x}-a{slot:03x}-{node_i:08x}{slot:04x}",
                node=node.name,
                slot=slot,
                model=node.gpu_model,
                pci_bus_id=f"00000000:{0x18 + slot * 0x10 & 0xFF:02X}:00.0",
                nvlink_domain=domain - 1 if size else -1,
            ))
    return Fleet(name=name, nodes=tuple(nodes), gpus=tuple(gpus), mig=MappingProxyType(dict(mig_of or {})))


# allowed ranges, checked by `_field` (ints compared before any float(): a 400-digit integer would overflow it)
_RANGES: dict[str, tuple[float, float, str]] = {
    "count": (1, 100_000, "an integer from 1 to 100000"),
    "gpusPerNode": (0, 16, "an integer from 0 to 16"),
    "cpuMilli": (1, 10_000_000, "an integer from 1 to 10000000 (10,000 cores)"),
    "memoryMiB": (1, 1 << 30, "an integer from 1 to 1073741824 (1 PiB)"),
    "inletC": (5.0, 50.0, "a temperature from 5 to 50 °C"),
}
# node names are Kubernetes object names; site and pool become label values (selectors such as site=eu-1)
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_FORMATS: dict[str, tuple[re.Pattern, str]] = {
    "site": (_LABEL_VALUE, "a non-empty label value: up to 63 letters, digits, '-', '_' and '.', starting and "
                           "ending with a letter or digit"),
    "pool": (_LABEL_VALUE, "a label value: up to 63 letters, digits, '-', '_' and '.', starting and ending with "
                           "a letter or digit (empty: none)"),
}


def _field(group: Mapping[str, Any], key: str, path: str, file: str | None, default: Any = None) -> Any:
    if key not in group:
        if default is None:
            raise InputError(file, f"{path}.{key}", None, f"a required {_type_name(_GROUP_FIELDS[key])}")
        return default
    value = group[key]
    want = _GROUP_FIELDS[key]
    if isinstance(value, bool) or not isinstance(value, want):
        raise InputError(file, f"{path}.{key}", value, _type_name(want, article=True))
    lo, hi, allowed = _RANGES.get(key, (None, None, ""))
    if lo is not None and not lo <= value <= hi:   # `not lo <= v <= hi`: NaN fails both comparisons
        raise InputError(file, f"{path}.{key}", value, allowed)
    pattern, allowed = _FORMATS.get(key, (None, ""))
    if pattern is not None and not (pattern.fullmatch(value) and (value or key == "pool")):
        raise InputError(file, f"{path}.{key}", value, allowed)
    return value


def _type_name(t: Any, article: bool = False) -> str:
    name = "number" if isinstance(t, tuple) else {int: "integer", str: "string", float: "number"}.get(t, str(t))
    return (("an " if name[0] in "aeiou" else "a ") + name) if article else name


def _group(group: Any, path: str, file: str | None) -> dict[str, Any]:
    """One node group's settings, validated; the keys are Node's fields (and namePrefix, count)."""
    if not isinstance(group, Mapping):
        raise InputError(file, path, group, "a mapping")
    unknown = sorted(set(group) - set(_GROUP_FIELDS), key=str)  # keys may be ints in hand-written YAML
    if unknown:
        raise InputError(file, f"{path}.{unknown[0]}", group[unknown[0]],
                         "one of the fields " + ", ".join(_GROUP_FIELDS))
    prefix, count = _field(group, "namePrefix", path, file), _field(group, "count", path, file)
    model = catalog.get(_field(group, "gpuModel", path, file), file=file, field=f"{path}.gpuModel").key
    per_node = _field(group, "gpusPerNode", path, file)
    nvl = _field(group, "nvlinkDomainSize", path, file, default=0)
    if nvl < 0 or (nvl > 1 and per_node % nvl):
        raise InputError(file, f"{path}.nvlinkDomainSize", nvl, f"0, 1 or a divisor of gpusPerNode ({per_node})")
    if nvl > 1 and not catalog.CATALOGUE[model].nvlink:
        raise InputError(file, f"{path}.nvlinkDomainSize", nvl, f"0: {model} has no NVLink")
    cooling = _field(group, "cooling", path, file, default="air")
    if cooling not in _COOLING:
        raise InputError(file, f"{path}.cooling", cooling, " | ".join(_COOLING))
    partition = mig.check_partition(model, group["mig"], file, f"{path}.mig") if "mig" in group else ()
    return {"prefix": prefix, "count": count, "gpu_model": model, "gpu_count": per_node, "nvlink_domain_size": nvl,
            "cooling": cooling,
            "inlet_c": float(_field(group, "inletC", path, file, default=25.0)),
            "cpu_milli": _field(group, "cpuMilli", path, file, default=64000),
            "memory_mib": _field(group, "memoryMiB", path, file, default=262144),
            "site": _field(group, "site", path, file, default="site-a"),
            "pool": _field(group, "pool", path, file, default=""), "mig": partition}


def from_dict(doc: Any, file: str | None = None) -> Fleet:
    doc = expect_kind(doc, file, "FleetSpec")
    name = document_name(doc, "fleet")
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        raise InputError(file, "spec", spec, "a mapping with nodeGroups")
    unknown = sorted((k for k in spec if k != "nodeGroups"), key=str)
    if unknown:
        raise InputError(file, f"spec.{unknown[0]}", spec[unknown[0]], "nodeGroups, the only field of spec")
    groups = spec.get("nodeGroups")
    if not isinstance(groups, list) or not groups:
        raise InputError(file, "spec.nodeGroups", groups, "a non-empty list of node groups")
    nodes: list[Node] = []
    mig_of: dict[str, tuple[str, ...]] = {}
    seen: set[str] = set()
    for i, group in enumerate(groups):
        path = f"spec.nodeGroups[{i}]"
        settings = _group(group, path, file)
        prefix, count, partition = settings.pop("prefix"), settings.pop("count"), settings.pop("mig")
        width = max(2, len(str(count - 1)))
        if not _NODE_NAME.fullmatch(f"{prefix}{0:0{width}d}") or not _NODE_NAME.fullmatch(f"{prefix}{count - 1}"):
            raise InputError(file, f"{path}.namePrefix", prefix, "a prefix of Kubernetes node names: lower-case "
                             "letters, digits, '-' and '.', starting with a letter or digit")
        for k in range(count):
            node_name = f"{prefix}{k:0{width}d}"
            if node_name in seen:
                raise InputError(file, f"{path}.namePrefix", prefix, "a prefix that gives unique node names")
            seen.add(node_name)
            nodes.append(Node(name=node_name, **settings))
            if partition:
                mig_of[node_name] = partition
    if not any(n.gpu_count for n in nodes):
        raise InputError(file, "spec.nodeGroups", "0 GPUs", "node groups with at least one GPU in all (gpusPerNode "
                         "> 0 in one of them)")
    return build(name, nodes, mig_of)


def load(path: str | Path) -> Fleet:
    return from_dict(read_yaml(path, "fleet spec"), str(path))


def demo_fleet() -> Fleet:
    """The default demo fleet: 32 nodes x 8 GPUs, four models, NVLink islands on the SXM boards."""
    return from_dict(yaml.safe_load(DEMO_FLEET_YAML), "<built-in demo fleet>")


def scaled_fleet(n_gpus: int, name: str = "scaled") -> Fleet:
    """A fleet of about `n_gpus` GPUs with the demo fleet's model mix (benchmarks and scale tests)."""
    groups = yaml.safe_load(DEMO_FLEET_YAML)["spec"]["nodeGroups"]
    per_group = max(1, round(n_gpus / (8 * len(groups))))
    doc = yaml.safe_load(DEMO_FLEET_YAML)
    doc["metadata"]["name"] = name
    for g in doc["spec"]["nodeGroups"]:
        g["count"] = per_group
    return from_dict(doc, f"<scaled fleet {n_gpus}>")


def alibaba_fleet(node_csv: str | Path) -> Fleet:
    """The Alibaba v2023 node list (sn, cpu_milli, memory_mib, gpu, model) as a fleet; CPU-only nodes are kept."""
    path = str(node_csv)
    nodes: list[Node] = []
    try:
        # utf-8-sig: a byte-order mark (Excel's UTF-8 CSV) is no part of the first column's name, as pandas reads it
        handle = open(node_csv, newline="", encoding="utf-8-sig")  # noqa: SIM115 - closed by the `with` below
    except OSError as exc:
        raise InputError(path, "(file)", path, "a readable node list CSV", str(exc)) from exc
    with handle:
        try:
            _alibaba_rows(csv.DictReader(handle), path, nodes)
        except (UnicodeDecodeError, csv.Error) as exc:
            raise InputError(path, "(file)", path, "a UTF-8 CSV node list", str(exc)) from exc
    if not nodes:
        raise InputError(path, "(rows)", 0, "at least one node")
    return build(Path(path).stem, nodes)


def _alibaba_rows(reader: csv.DictReader, path: str, nodes: list[Node]) -> None:
    need = {"sn", "cpu_milli", "memory_mib", "gpu", "model"}
    missing = need - set(reader.fieldnames or ())
    if missing:
        raise InputError(path, "(header)", reader.fieldnames, "columns " + ", ".join(sorted(need)))
    seen: set[str] = set()
    for row_no, row in enumerate(reader, start=2):
        if any(row[k] is None for k in need):  # DictReader pads a short row with None
            raise InputError(path, f"row {row_no}", row, "a value in every column " + ", ".join(sorted(need)))
        try:
            gpus = int(row["gpu"])
            cpu, mem = int(row["cpu_milli"]), int(row["memory_mib"])
        except (TypeError, ValueError) as exc:
            raise InputError(path, f"row {row_no}", row, "integer cpu_milli, memory_mib, gpu") from exc
        if not 0 <= gpus <= 64 or cpu < 0 or mem < 0:
            raise InputError(path, f"row {row_no}", row, "gpu from 0 to 64, cpu_milli and memory_mib >= 0")
        name = row["sn"].strip()
        if not name or name in seen:
            raise InputError(path, f"row {row_no}.sn", row["sn"], "a non-empty node name not used before")
        seen.add(name)
        model = row["model"].strip()
        key = catalog.get(model, file=path, field=f"row {row_no}.model").key if gpus else "T4"
        nvl = 8 if gpus == 8 and catalog.CATALOGUE[key].nvlink else 0
        nodes.append(Node(name=name, gpu_model=key, gpu_count=gpus, cpu_milli=cpu, memory_mib=mem,
                          nvlink_domain_size=nvl, pool=model or key))


DEMO_FLEET_YAML = """
apiVersion: gputide/v1alpha1
kind: FleetSpec
metadata: {name: demo}
spec:
  nodeGroups:
    - {namePrefix: h100-, count: 8, gpuModel: H100-SXM, gpusPerNode: 8, nvlinkDomainSize: 8,
       cpuMilli: 192000, memoryMiB: 2097152, site: site-a, cooling: liquid, inletC: 30}
    - {namePrefix: a100-, count: 8, gpuModel: A100-SXM4-80GB, gpusPerNode: 8, nvlinkDomainSize: 8,
       cpuMilli: 128000, memoryMiB: 1048576, site: site-a, cooling: air, inletC: 25}
    - {namePrefix: l40s-, count: 8, gpuModel: L40S, gpusPerNode: 8, nvlinkDomainSize: 0,
       cpuMilli: 96000, memoryMiB: 786432, site: site-a, cooling: air, inletC: 25}
    - {namePrefix: a100p-, count: 8, gpuModel: A100-PCIE-40GB, gpusPerNode: 8, nvlinkDomainSize: 2,
       cpuMilli: 96000, memoryMiB: 524288, site: site-a, cooling: air, inletC: 25}
"""
