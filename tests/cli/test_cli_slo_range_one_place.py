"""A p99 latency SLO's bounds live in one place, `balancer.config.SLO_RANGE_S` (review s33h24): the policy's
`latencySloSeconds` default, a services file's `latencySloSeconds` and `calibrate --slo` each wrote 0.001 to 3600 out
for themselves, so one could move without the others and calibrate write a profile the controller refuses."""

from __future__ import annotations

from dataclasses import fields

from balancer import config
from balancer.app.capacity_run import _FIELDS
from balancer.cmd import calibrate


def test_the_three_readers_share_one_range():
    colocation = {f.name: f for f in fields(config.ColocationPolicy)}
    assert colocation["latency_slo_s"].metadata["range"] == config.SLO_RANGE_S
    assert _FIELDS["latencySloSeconds"][2:4] == config.SLO_RANGE_S
    assert calibrate.SLO_RANGE_S is config.SLO_RANGE_S


def test_the_range_is_what_the_documents_say():
    """calibrate's --help and the policy reference say 0.001 to 3600 s."""
    assert config.SLO_RANGE_S == (1e-3, 3600.0)
