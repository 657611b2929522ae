"""`gputide slo-rules --exact`: a pipeline that must not judge an SLO at the bucket boundary under it gets exit 2
naming the service's field and the boundaries around it, and no rule file."""

from __future__ import annotations

import pytest

from balancer.cli import main

PROFILES = """apiVersion: gputide/v1alpha1
kind: ServiceProfiles
services:
  - {name: chat, rpsPerReplica: 10, latencySloSeconds: 0.5}
  - {name: search, rpsPerReplica: 10, latencySloSeconds: %s}
"""


@pytest.mark.parametrize(("slo", "around"), [(0.7, "0.5 s or 0.8 s"), (3000, "1920 s or 7680 s")],
                         ids=["between two boundaries", "an hour-long SLO"])
def test_an_slo_between_boundaries_exits_2_with_exact(tmp_path, capsys, slo, around):
    services = tmp_path / "services.yaml"
    services.write_text(PROFILES % slo)
    out = tmp_path / "slo.yaml"
    assert main(["slo-rules", "--services", str(services), "--exact", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "services[1].latencySloSeconds" in err and around in err and str(services) in err
    assert not out.exists()


def test_boundaries_pass_with_exact_and_without_it_the_lower_boundary_is_said(tmp_path, capsys):
    services = tmp_path / "services.yaml"
    services.write_text(PROFILES % 0.8)
    assert main(["slo-rules", "--services", str(services), "--exact"]) == 0
    assert "search: SLO 0.8 s, counted at the le=0.8 bucket" in capsys.readouterr().err
    services.write_text(PROFILES % 0.7)
    assert main(["slo-rules", "--services", str(services)]) == 0
    assert "search: SLO 0.7 s is not a bucket boundary; requests over 0.5 s" in capsys.readouterr().err
