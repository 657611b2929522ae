"""Building the `gputide` parser (which every command does, the exporter and the power-cap agent included) imports
nothing that needs a writable home directory: both run on a read-only root filesystem, and matplotlib, imported
for `gputide dashboards render` only, refuses to start without a writable cache directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_building_the_parser_does_not_import_matplotlib():
    code = ("import sys\nfrom balancer.cli import build_parser\nbuild_parser()\n"
            "print(','.join(m for m in ('matplotlib', 'balancer.dashboards_render') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""

