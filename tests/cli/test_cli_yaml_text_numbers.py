"""A number YAML 1.1 reads as text gets a hint (audit s32x5, item 5): PyYAML takes `1e-3` (no dot) for a string, so
`minExpectedGain: 1e-3` was refused as "invalid value '1e-3'; allowed: a number from 0 to 1e+09" with no word why.
The message now says YAML read it as text and how to write it, for a policy and for ServiceProfiles."""

from __future__ import annotations

import pytest

from balancer.cli import main

POLICY = "apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\nspec:\n  safety:\n    {key}: {value}\n"
SERVICES = ("apiVersion: gputide/v1alpha1\nkind: ServiceProfiles\nservices:\n"
            "  - name: chat\n    rpsPerReplica: {value}\n")


@pytest.mark.parametrize("doc, field, hint", [
    (POLICY.format(key="minExpectedGain", value="1e-3"), "spec.safety.minExpectedGain", "write 0.001"),
    (POLICY.format(key="evictionBudget", value="1e3"), "spec.safety.evictionBudget", "write 1000"),
    (SERVICES.format(value="3e1"), "services[0].rpsPerReplica", "write 30.0"),
], ids=["policy number", "policy integer", "service profiles"])
def test_a_number_read_as_text_says_how_to_write_it(tmp_path, capsys, doc, field, hint):
    path = tmp_path / "file.yaml"
    path.write_text(doc)
    assert main(["check", str(path)]) == 2
    out = capsys.readouterr()
    text = out.out + out.err
    assert f"field '{field}'" in text and "YAML reads" in text and "as text" in text and hint in text, text


def test_text_that_is_no_number_gets_no_hint(tmp_path, capsys):
    path = tmp_path / "file.yaml"
    path.write_text(POLICY.format(key="minExpectedGain", value="lots"))
    assert main(["check", str(path)]) == 2
    out = capsys.readouterr()
    assert "spec.safety.minExpectedGain" in out.out + out.err and "as text" not in out.out + out.err


@pytest.mark.parametrize("written", ["5e-6", "1e-7", "2e20", "1E-5"])
def test_the_hint_is_a_number_yaml_reads_as_one(written):
    """The hint printed Python's repr, `5e-06`, which PyYAML reads as text too (audit s32y9): the user was told to write
    what had just been refused. The hint's mantissa has a dot, so YAML reads it as the float meant."""
    import yaml

    from balancer.config import number_as_text

    hint = number_as_text(written)
    suggested = hint.rsplit("write ", 1)[1]
    assert yaml.safe_load(f"a: {suggested}")["a"] == float(written), hint
