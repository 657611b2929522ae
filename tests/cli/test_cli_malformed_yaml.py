"""A YAML file whose anchors and aliases stand for millions of values exits 2 naming the file, at once.

Before, nine anchors of nine aliases each (a few hundred bytes, a 'billion laughs') were read as 387 million
values: the error naming one wrote them all out (its repr) and `gputide check`, `simulate --policy-file` or
`run --policy` ran for ever; seven levels still put a 14 MB line on stderr.
"""

from __future__ import annotations

import pytest

from balancer.cli import main

HEAD = {
    "BalancerPolicy": "apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\n",
    "ServiceProfiles": "apiVersion: gputide/v1alpha1\nkind: ServiceProfiles\n",
}


def _bomb(levels: int, key: str) -> str:
    anchors = ["  l0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    anchors += [f"  l{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "metadata:\n  labels:\n" + "\n".join("  " + a for a in anchors) + f"\n{key}: *a{levels - 1}\n"


@pytest.mark.parametrize("argv, kind, key", [
    pytest.param(["check", "{f}"], "BalancerPolicy", "spec", id="check a policy"),
    pytest.param(["simulate", "--scenario", "hotspot", "--policy", "gputide", "--days", "0.01", "--no-plots",
                  "--out", "{tmp}/out", "--policy-file", "{f}"], "BalancerPolicy", "spec", id="simulate --policy-file"),
    pytest.param(["slo-rules", "--services", "{f}"], "ServiceProfiles", "services", id="slo-rules --services"),
])
def test_aliases_that_repeat_millions_of_values_exit_2(tmp_path, capsys, argv, kind, key):
    path = tmp_path / "file.yaml"
    path.write_text(HEAD[kind] + _bomb(7, key))   # 9**7: 4.8 million values
    code = main([a.replace("{f}", str(path)).replace("{tmp}", str(tmp_path)) for a in argv])
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and len(lines[0]) < 400, captured.err[:400]
    assert lines[0].startswith(f"gputide: error: {path}: field '(document)': invalid value "
                               "'aliases that expand "), lines
    assert "allowed: YAML whose anchors and aliases" in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_a_few_aliases_and_merge_keys_still_read(tmp_path, capsys):
    path = tmp_path / "policy.yaml"
    path.write_text(HEAD["BalancerPolicy"] + "spec:\n  hotspots: &h {marginC: 5}\n  throttling: {enabled: true}\n"
                    "  safety: {protectedNamespaces: &ns [kube-system, gputide]}\n")
    assert main(["check", str(path)]) == 0, capsys.readouterr().err
