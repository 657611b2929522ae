"""What a site could lend: only GPUs whose telemetry is fresh and whose memory is healthy. A site whose exporters
stopped (every reading old) has nothing to lend, however idle its last readings looked."""

from __future__ import annotations

import numpy as np

from balancer import fleet as fleet_mod
from balancer.app.multisite import global_spare, spare_gpus
from balancer.sim import SimCluster


def _idle_site():
    return SimCluster(fleet_mod.scaled_fleet(64, "b"), seed=1)


def test_a_site_whose_readings_are_stale_lends_nothing():
    site = _idle_site()
    assert sum(spare_gpus(site.snapshot(sample_age_s=5.0)).values()) == 64
    assert spare_gpus(site.snapshot(sample_age_s=3600.0)) == {}
    assert global_spare({"b": site.snapshot(sample_age_s=3600.0)}) == {"b": {}}


def test_a_gpu_with_unknown_age_or_bad_memory_is_not_spare():
    snap = _idle_site().snapshot()
    age = np.array(snap.sample_age_s, dtype=float)
    age[0] = np.nan
    unhealthy = np.zeros(snap.n_gpus, dtype=bool)
    unhealthy[1] = True
    assert sum(spare_gpus(snap.replace(sample_age_s=age, memory_unhealthy=unhealthy)).values()) == 62


def test_the_freshness_limit_is_the_callers():
    snap = _idle_site().snapshot(sample_age_s=300.0)
    assert spare_gpus(snap, max_sample_age_s=600.0) and not spare_gpus(snap)
