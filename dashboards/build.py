"""Generate `dashboards/*.json` from the Python sources: `python -m dashboards.build [--out DIR] [--check]`.

The JSON files are committed so that users can import them without Python; `--check` (and a test) fails when
they are out of date with the sources. Output is deterministic (sorted keys, fixed indentation) so a diff
shows exactly what a source change did.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder

from dashboards import capacity, chargeback, controller, fleet, utilisation

HERE = Path(__file__).resolve().parent
_SUM_BY = re.compile(r"sum by \(([^)]+)\)")

# file stem -> builder; the stem is also the ConfigMap key in deploy/.
DASHBOARDS: dict[str, Callable] = {
    "gpu-fleet": fleet.build,
    "tidal-capacity": capacity.build,
    "balancer": controller.build,
    "fragmentation-utilisation": utilisation.build,
    "usage-chargeback": chargeback.build,
}


def _finish(model: dict) -> dict:
    # Fields the SDK's AnnotationQuery model does not carry but Grafana's Prometheus annotations use:
    # the step, the event's title and text (the labels of the query's outer `sum by`, dashboards.common's
    # counter_annotation: an action's type and reason) and the tags (the last of them).
    for ann in model.get("annotations", {}).get("list", []):
        if ann.get("expr"):
            labels = [label.strip() for label in _SUM_BY.match(ann["expr"])[1].split(",")]
            ann.setdefault("step", "1m")
            ann.setdefault("titleFormat", ann["name"])
            ann.setdefault("textFormat", ": ".join(f"{{{{{label}}}}}" for label in labels))
            ann.setdefault("tagKeys", labels[-1])
            ann.setdefault("useValueForTime", False)
    model["schemaVersion"] = model.get("schemaVersion") or 39
    return model


def to_model(name: str) -> dict:
    """The dashboard `name` as a plain JSON-able dict."""
    built = DASHBOARDS[name]().build()
    return _finish(json.loads(json.dumps(built, cls=JSONEncoder)))


def to_json(name: str) -> str:
    return json.dumps(to_model(name), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def build_all(out_dir: Path = HERE) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in DASHBOARDS:
        path = out_dir / f"{name}.json"
        path.write_text(to_json(name), encoding="utf-8")
        written.append(path)
    return written


def stale(out_dir: Path = HERE) -> list[str]:
    """Names of the dashboards whose JSON in `out_dir` differs from what the sources generate."""
    return [n for n in DASHBOARDS
            if not (out_dir / f"{n}.json").exists()
            or (out_dir / f"{n}.json").read_text(encoding="utf-8") != to_json(n)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards.build", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="directory for the JSON files")
    parser.add_argument("--check", action="store_true", help="exit 1 if the JSON files are out of date")
    args = parser.parse_args(argv)
    if args.check:
        out_of_date = stale(args.out)
        for name in out_of_date:
            print(f"{args.out / name}.json is out of date: run python -m dashboards.build", file=sys.stderr)
        return 1 if out_of_date else 0
    for path in build_all(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
