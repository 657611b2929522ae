"""Evaluate committed dashboard queries with promtool: Grafana's variables filled in as the renderer fills them,
each query checked for one value at one time over given input series."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from balancer.dashboards_render import interpolate

ROOT = Path(__file__).resolve().parents[2]
ALL = {"cluster": ".*", "node": ".*", "model": ".*", "gpu": ".*", "service": ".*"}


def panel(file: str, title: str) -> dict:
    """The committed dashboard `file`'s panel titled `title`."""
    (found,) = [p for p in json.loads((ROOT / "dashboards" / file).read_text())["panels"] if p.get("title") == title]
    return found


def colour(panel: dict, value: float) -> str:
    """The colour Grafana gives `value` under the panel's absolute thresholds (the last step at or below it)."""
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    return [s["color"] for s in steps if s["value"] is None or value >= s["value"]][-1]


def panel_query(file: str, title: str, legend: str, variables: dict[str, str] | None = None) -> str:
    """The query of `file`'s panel `title` whose legend is `legend`, every variable at All but those `variables`
    sets."""
    (target,) = [t for t in panel(file, title)["targets"] if t.get("legendFormat") == legend]
    return interpolate(target["expr"], {**ALL, **(variables or {})}, step=60, range_s=3600)


def check(promtool: str, tmp_path: Path, series: list[dict], expected: dict[tuple[str, str, str], float | None], *,
          rules: Path | None = None, interval: str = "1m", eval_time: str = "5m",
          group_eval_order: list[str] | None = None) -> None:
    """Assert each (file, title, legend) query reads its expected value at `eval_time` (promtool names the
    failing ones); None expects No data. Without `rules`, no recording rule runs. `group_eval_order` is the order
    promtool evaluates the rule groups in at each step (a real Prometheus runs each on its own clock)."""
    tests = [{"expr": panel_query(*key), "eval_time": eval_time,
              "exp_samples": [] if value is None else [{"value": value}]} for key, value in expected.items()]
    run(promtool, tmp_path, series, tests, rules=rules, interval=interval, group_eval_order=group_eval_order)


def check_exprs(promtool: str, tmp_path: Path, series: list[dict], expected: dict[str, dict[str, float]], *,
                rules: Path | None = None, interval: str = "1m", eval_time: str = "5m") -> None:
    """Assert each expression (a panel's query wrapped in a `... by (UUID)` aggregation) reads {UUID: value}."""
    tests = [{"expr": expr, "eval_time": eval_time,
              "exp_samples": [{"labels": f'{{UUID="{u}"}}', "value": v} for u, v in sorted(by_uuid.items())]}
             for expr, by_uuid in expected.items()]
    run(promtool, tmp_path, series, tests, rules=rules, interval=interval)


def run(promtool: str, tmp_path: Path, series: list[dict], tests: list[dict], *, rules: Path | None = None,
        interval: str = "1m", group_eval_order: list[str] | None = None) -> None:
    """promtool's `test rules` over `series` with the promql_expr_test entries `tests`."""
    if rules is None:
        rules = tmp_path / "none.yaml"
        rules.write_text("groups: []\n")
    test = {"rule_files": [str(rules)], "evaluation_interval": interval, "tests": [{
        "interval": interval, "input_series": series, "promql_expr_test": tests}]}
    if group_eval_order:
        test["group_eval_order"] = group_eval_order
    path = tmp_path / "panels_test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
