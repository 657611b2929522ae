"""An older tree of the project, for benchmarks that time "before" and "now" in the same run, and their section."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def exported(commit: str, *paths: str) -> Iterator[Path | None]:
    """`paths` of `commit` (`git archive`) in a temporary folder, or None outside a git clone / unknown commit."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", commit, *paths], cwd=ROOT, capture_output=True)
        if archive.returncode != 0:
            yield None
            return
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        yield Path(tmp)


def measured(tree: Path, module: str, call: str) -> dict:
    """`bench.<module>.<call>` evaluated in a fresh process on `tree` (its JSON-able answer)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    res = subprocess.run([sys.executable, "-c", f"import json, bench.{module} as b; print(json.dumps(b.{call}))"],
                         capture_output=True, text=True, check=True, env=env, cwd=tree)
    return json.loads(res.stdout.strip().splitlines()[-1])


def now_and_before(module: str, commit: str, calls: list[str]) -> tuple[list[dict], list[dict]]:
    """Each call of `measured` on this tree and on `commit`'s `balancer` with this tree's bench module, the two
    in turn call by call, so that a change in the machine's load falls on both."""
    with exported(commit, "balancer") as tree:
        if tree is None:
            raise RuntimeError(f"{module} times the tree at {commit}: it needs a git clone")
        (tree / "bench").mkdir()
        (tree / "bench" / "__init__.py").write_text("")
        (tree / "bench" / f"{module}.py").write_text((ROOT / "bench" / f"{module}.py").read_text())
        pairs = [(measured(ROOT, module, call), measured(tree, module, call)) for call in calls]
    return [now for now, _ in pairs], [before for _, before in pairs]


def section(title: str, about: str, columns: list[str], rows: list[list[str]]) -> str:
    """A before/now benchmark's markdown section: title, what was measured (with its command), the table, the
    machine."""
    lines = [f"## {title}", "", about, "", "| " + " | ".join(columns) + " |", "|" + "---:|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += ["", f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end of the run."]
    return "\n".join(lines) + "\n"
