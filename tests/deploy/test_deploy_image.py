"""The image's base is pinned: the Python minor gputide is tested on and the Debian release under it (a digest on
top, where a release pins one). `python:3.11-slim` follows Debian's newest release: it moved from bookworm to trixie
in 2025, so rebuilding the same commit silently changed glibc, OpenSSL and every library the wheels link against."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEBIAN_RELEASES = {"bookworm", "trixie"}
PINNED = re.compile(r"python:(?P<minor>3\.\d+)(?:\.\d+)?-slim-(?P<debian>[a-z]+)(?:@sha256:[0-9a-f]{64})?")


def base_images() -> list[str]:
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    return [line.split()[1] for line in text.splitlines() if line.startswith("FROM ")]


def test_the_image_base_pins_the_python_minor_and_the_debian_release():
    (base,) = base_images()
    pinned = PINNED.fullmatch(base)
    assert pinned, f"FROM {base}: name the Debian release (python:3.11-slim-bookworm), optionally @sha256:<digest>"
    assert pinned["debian"] in DEBIAN_RELEASES
    # the oldest Python gputide supports (pyproject's requires-python), the one its code is written against
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == f">={pinned['minor']}"
