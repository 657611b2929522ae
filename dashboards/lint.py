"""Lint rules for the generated dashboards, in the spirit of grafana/dashboard-linter.

Each rule is a function `rule(dashboard: dict) -> list[str]` (one message per problem) registered in `RULES`;
`lint(dashboard)` runs them all. They read the generated JSON, not the Python sources, so they check exactly
what a user imports into Grafana:

- template-datasource: a `datasource` variable of type prometheus exists;
- panel-datasource: every panel, target and annotation uses `${datasource}`;
- panel-title-description / panel-units: every panel has a title, a description and a unit;
- target-rate-interval: every rate()/irate()/increase() range is `$__rate_interval`;
- template-variables: `cluster` (and `node`, `model`, `gpu` where there are) are multi-select label_values
  queries on a normalised series, over the `cluster`, `hostname`, `modelName` (and `gpu`) labels, with "All"
  matching an absent label (`.*`); every variable a query names is defined (before the variable that names it), and
  every variable is named by some panel query, annotation or repeat: a selector no panel reads looks like a filter
  and filters nothing (a node picked on a dashboard of the controller's series changed no line);
- template-gpu-variable: a dashboard with per-GPU panels (a legend or a grid column per `gpu`) has a `gpu`
  variable, after `model` and chained on `$cluster`, `$node` and `$model`;
- target-label-filters: every query filters on `$cluster`; per-GPU `gpu:*` and `gpu_instance:*` selectors also on
  `$node` and `$model`, and on `$gpu` where the dashboard has that variable;
- target-normalised-series: no raw `DCGM_*` names (dashboards read the recording rules of docs/metrics.md);
- panel-grid: every panel lies within Grafana's 24 columns and no two panels overlap (the SDK's auto layout
  places a panel that does not fit the rest of a line past the edge instead of wrapping it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

DATASOURCE_UID = "${datasource}"
EXPECTED_VARIABLES = {"cluster": "cluster", "node": "hostname", "model": "modelName"}
REQUIRED_VARIABLES = ("cluster",)   # the others only where a panel reads them
GPU_VARIABLE = ("gpu", "gpu")   # (name, label), on dashboards with per-GPU panels
_RATE_FUNC = re.compile(r"\b(rate|irate|increase)\s*\(")
_RANGE = re.compile(r"\[([^\]]+)\]")
_GPU_SELECTOR = re.compile(r"\bgpu(?:_instance)?:[a-z_]+:[a-z_]+\{([^}]*)\}")
_VARIABLE_REF = re.compile(r"\$\{?([A-Za-z_]\w*)")   # $name, ${name}, ${name:fmt}; not $1 nor $__interval
_LABEL_VALUES = re.compile(r"^label_values\((?P<metric>[a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?,\s*(?P<label>\w+)\)$")


def panels(dashboard: dict) -> Iterator[dict]:
    """Every non-row panel, including those nested in collapsed rows."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def targets(dashboard: dict) -> Iterator[tuple[str, dict]]:
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield panel.get("title", "?"), target
    for ann in dashboard.get("annotations", {}).get("list", []):
        if ann.get("expr"):
            yield f"annotation {ann.get('name')}", ann


def _uses_datasource(ref: object) -> bool:
    return isinstance(ref, dict) and ref.get("uid") == DATASOURCE_UID and ref.get("type") == "prometheus"


def template_datasource(dashboard: dict) -> list[str]:
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("name") == "datasource" and var.get("type") == "datasource" and var.get("query") == "prometheus":
            return []
    return ["no `datasource` template variable of type datasource / prometheus"]


def panel_datasource(dashboard: dict) -> list[str]:
    problems = [f"panel {p.get('title')!r} does not use ${{datasource}}"
                for p in panels(dashboard) if not _uses_datasource(p.get("datasource"))]
    problems += [f"{where}: target {t.get('refId')} does not use ${{datasource}}"
                 for where, t in targets(dashboard) if not _uses_datasource(t.get("datasource"))]
    return problems


def panel_title_description(dashboard: dict) -> list[str]:
    problems = []
    for i, p in enumerate(panels(dashboard)):
        if not str(p.get("title", "")).strip():
            problems.append(f"panel #{i} has no title")
        if not str(p.get("description", "")).strip():
            problems.append(f"panel {p.get('title')!r} has no description")
    return problems


def panel_units(dashboard: dict) -> list[str]:
    return [f"panel {p.get('title')!r} has no unit" for p in panels(dashboard)
            if not p.get("fieldConfig", {}).get("defaults", {}).get("unit")]


def _call_args(expr: str, open_paren: int) -> str:
    depth = 0
    for i in range(open_paren, len(expr)):
        depth += {"(": 1, ")": -1}.get(expr[i], 0)
        if depth == 0:
            return expr[open_paren + 1:i]
    return expr[open_paren + 1:]


def target_rate_interval(dashboard: dict) -> list[str]:
    problems = []
    for where, t in targets(dashboard):
        expr = t.get("expr", "")
        for match in _RATE_FUNC.finditer(expr):
            ranges = _RANGE.findall(_call_args(expr, match.end() - 1))
            bad = [r for r in ranges if r.strip() != "$__rate_interval"]
            if bad or not ranges:
                problems.append(f"{where}: {match.group(1)}() over {bad or 'no range'}, want [$__rate_interval]")
    return problems


def _variables(dashboard: dict) -> dict[str, dict]:
    return {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}


def _variable_query(var: dict) -> str:
    query = var.get("query")
    return (query.get("query", "") if isinstance(query, dict) else str(query or "")).strip()


def _named_variables(text: str) -> set[str]:
    return {name for name in _VARIABLE_REF.findall(text) if not name.startswith("__")}


def _variable_problems(dashboard: dict) -> list[str]:
    """Variables a query names but no variable defines (or only one after it, which it cannot read), and variables
    no panel query, annotation or panel repeat names."""
    found = _variables(dashboard)
    order = list(found)
    problems = [f"{where}: query names ${name}, which no variable defines"
                for where, t in targets(dashboard) for name in sorted(_named_variables(t.get("expr", "")))
                if name not in found]
    for i, (name, var) in enumerate(found.items()):
        problems += [f"variable {name!r} names ${ref}, " + ("which no variable defines" if ref not in found else
                                                              "defined after it")
                     for ref in sorted(_named_variables(_variable_query(var))) if ref not in order[:i]]
    used = {name for _, t in targets(dashboard) for name in _named_variables(t.get("expr", ""))}
    used |= {str(p.get("repeat")) for p in panels(dashboard) if p.get("repeat")}
    problems += [f"variable {name!r} is used by no panel query: it selects nothing" for name, var in found.items()
                 if var.get("type") == "query" and name not in used]
    return problems


def template_variables(dashboard: dict) -> list[str]:
    found = _variables(dashboard)
    problems = [f"variable {name!r} missing" for name in REQUIRED_VARIABLES if name not in found]
    expected = {**EXPECTED_VARIABLES, **dict([GPU_VARIABLE])}
    for name, label in expected.items():
        var = found.get(name)
        if var is None:
            continue
        query = _variable_query(var)
        m = _LABEL_VALUES.match(query)
        if var.get("type") != "query" or not m or m["label"] != label or ":" not in m["metric"]:
            problems.append(f"variable {name!r}: want label_values(<recording rule>, {label}), got {query!r}")
        if not _uses_datasource(var.get("datasource")):
            problems.append(f"variable {name!r} does not use ${{datasource}}")
        if not var.get("includeAll") or var.get("allValue") != ".*":
            problems.append(f"variable {name!r}: want includeAll with allValue '.*'")
        if not var.get("multi"):
            problems.append(f"variable {name!r}: want a multi-select")
    return problems + _variable_problems(dashboard)


def _per_gpu(panel: dict) -> bool:
    """A panel that draws one series, row or column per GPU: a legend naming `{{gpu}}`, or a grid with a column per
    GPU index (groupingToMatrix over `gpu`)."""
    legends = [t.get("legendFormat", "") for t in panel.get("targets", [])]
    grids = [tr.get("options", {}) for tr in panel.get("transformations", []) if tr.get("id") == "groupingToMatrix"]
    return any("{{gpu}}" in lg for lg in legends) or any("gpu" in (g.get("rowField"), g.get("columnField"))
                                                          for g in grids)


def template_gpu_variable(dashboard: dict) -> list[str]:
    per_gpu = [p.get("title") for p in panels(dashboard) if _per_gpu(p)]
    if not per_gpu:
        return []
    names = list(_variables(dashboard))
    if GPU_VARIABLE[0] not in names:
        return [f"per-GPU panels {per_gpu} but no `gpu` variable"]
    problems = []
    if names.index(GPU_VARIABLE[0]) < max(names.index(n) for n in EXPECTED_VARIABLES if n in names):
        problems.append("variable 'gpu' comes before cluster, node or model: it cannot list their GPUs")
    query = _variable_query(_variables(dashboard)[GPU_VARIABLE[0]])
    problems += [f"variable 'gpu' is not chained on {v}: {query!r}"
                 for v in ("$cluster", "$node", "$model") if v not in query]
    return problems


def target_label_filters(dashboard: dict) -> list[str]:
    problems = []
    gpu_variable = GPU_VARIABLE[0] in _variables(dashboard)
    for where, t in targets(dashboard):
        expr = t.get("expr", "")
        if "$cluster" not in expr:
            problems.append(f"{where}: query does not filter on $cluster: {expr}")
        for labels in _GPU_SELECTOR.findall(expr):
            if "$node" not in labels or "$model" not in labels:
                problems.append(f"{where}: per-GPU selector {{{labels}}} does not filter on $node and $model")
            if gpu_variable and '$gpu"' not in labels:
                problems.append(f"{where}: per-GPU selector {{{labels}}} does not filter on $gpu")
    return problems


def target_normalised_series(dashboard: dict) -> list[str]:
    return [f"{where}: raw DCGM series in {t.get('expr')}" for where, t in targets(dashboard)
            if "DCGM_" in t.get("expr", "")]


def panel_grid(dashboard: dict) -> list[str]:
    problems, taken = [], {}
    for panel in panels(dashboard):
        g = panel.get("gridPos") or {}
        x, y, w, h = (int(g.get(k, 0)) for k in ("x", "y", "w", "h"))
        if x < 0 or x + w > 24:
            problems.append(f"{panel.get('title')!r} spans columns {x}..{x + w}, beyond the 24-column grid")
        for cell in ((cx, cy) for cx in range(x, x + w) for cy in range(y, y + h)):
            if cell in taken:
                problems.append(f"{panel.get('title')!r} overlaps {taken[cell]!r}")
                break
            taken[cell] = panel.get("title")
    return problems


RULES: dict[str, Callable[[dict], list[str]]] = {
    "template-datasource": template_datasource,
    "panel-datasource": panel_datasource,
    "panel-title-description": panel_title_description,
    "panel-units": panel_units,
    "target-rate-interval": target_rate_interval,
    "template-variables": template_variables,
    "template-gpu-variable": template_gpu_variable,
    "target-label-filters": target_label_filters,
    "target-normalised-series": target_normalised_series,
    "panel-grid": panel_grid,
}


def lint(dashboard: dict) -> dict[str, list[str]]:
    """Problems per rule name; an empty dict means the dashboard passes."""
    results = {name: rule(dashboard) for name, rule in RULES.items()}
    return {name: found for name, found in results.items() if found}
