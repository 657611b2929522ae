"""The README section's policy reference is generated from the dataclasses: it must not drift."""

from pathlib import Path

from balancer import config

DOC = Path(__file__).resolve().parents[2] / "docs" / "readme" / "loop.md"


def test_the_policy_reference_in_the_readme_matches_the_code():
    assert config.reference_markdown() in DOC.read_text()
