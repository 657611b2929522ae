"""An older tree of the project, for benchmarks that time "before" and "now" in the same run."""

from __future__ import annotations

import subprocess
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
