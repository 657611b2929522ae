"""`gputide check`: every gputide file (or ConfigMap carrying one) is validated by the loader the controller uses,
with one line per document, errors naming file, field, value and what is allowed, and exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from balancer import fleet
from balancer.cli import main

ROOT = Path(__file__).resolve().parents[2]
POLICY = ("apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\nmetadata: {name: prod}\n"
          "spec:\n  safety: {evictionBudget: %s}\n")


def check(capsys, *paths) -> tuple[int, str, str]:
    rc = main(["check", *map(str, paths)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_a_valid_policy_says_what_it_sets_away_from_the_defaults(tmp_path, capsys):
    (tmp_path / "p.yaml").write_text(POLICY % 7)
    rc, out, err = check(capsys, tmp_path / "p.yaml")
    assert rc == 0 and not err
    assert "BalancerPolicy 'prod', 1 field(s) away from the defaults: spec.safety.evictionBudget=7" in out


def test_an_invalid_file_exits_2_naming_file_field_value_and_allowed_and_the_rest_are_still_checked(tmp_path, capsys):
    bad, good = tmp_path / "bad.yaml", tmp_path / "good.yaml"
    bad.write_text(POLICY % -1)
    good.write_text(POLICY % 3)
    rc, out, err = check(capsys, bad, good)
    assert rc == 2
    assert str(bad) in err and "spec.safety.evictionBudget" in err and "-1" in err and "an integer from 0" in err
    assert f"{good}: ok" in out


def test_a_configmap_manifest_is_checked_inside_and_other_objects_are_left_alone(tmp_path, capsys):
    body = (POLICY % 99).replace("\n", "\n    ")
    manifest = tmp_path / "m.yaml"
    manifest.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n---\n"
                        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: gputide-policy}\ndata:\n"
                        f"  other.txt: hello\n  policy.yaml: |\n    {body}\n")
    rc, out, _ = check(capsys, manifest)
    assert rc == 0 and "(ConfigMap gputide-policy, data.policy.yaml): ok" in out and "evictionBudget=99" in out
    manifest.write_text(manifest.read_text().replace("evictionBudget: 99", "evictionBudgets: 99"))
    rc, _, err = check(capsys, manifest)
    assert rc == 2 and "ConfigMap gputide-policy, data.policy.yaml" in err and "spec.safety.evictionBudgets" in err


def test_every_configmap_the_deployment_ships_is_valid(capsys):
    files = [ROOT / "deploy/base/policy.yaml",
             *(ROOT / "deploy/components/capacity" / f for f in ("policy.yaml", "services.yaml"))]
    rc, out, err = check(capsys, *files)
    assert rc == 0, err
    assert "BalancerPolicy" in out and "ServiceProfiles" in out


def test_a_fleet_spec_is_summarised(tmp_path, capsys):
    (tmp_path / "fleet.yaml").write_text(fleet.DEMO_FLEET_YAML)
    rc, out, _ = check(capsys, tmp_path / "fleet.yaml")
    assert rc == 0 and f"{fleet.demo_fleet().n_gpus} GPU(s)" in out and "FleetSpec" in out


@pytest.mark.parametrize(("text", "field"), [
    ("apiVersion: gputide/v1alpha1\nkind: Policy\nspec: {}\n", "'kind'"),
    ("apiVersion: v1\nkind: Service\nmetadata: {name: x}\n", "'kind'"),   # nothing of ours in the file
    ("spec: [unclosed\n", "(document)"),
    ("apiVersion: gputide/v1alpha1\nkind: ServiceProfiles\nservices: []\n", "'services'"),
], ids=["unknown-kind", "no-gputide-document", "bad-yaml", "empty-services"])
def test_what_is_not_a_valid_gputide_file_exits_2(tmp_path, capsys, text, field):
    (tmp_path / "x.yaml").write_text(text)
    rc, _, err = check(capsys, tmp_path / "x.yaml")
    assert rc == 2 and field in err and "x.yaml" in err


def test_a_missing_file_exits_2(tmp_path, capsys):
    rc, _, err = check(capsys, tmp_path / "nope.yaml")
    assert rc == 2 and "nope.yaml" in err and "(file)" in err
