"""Files `gputide run` needs to shift capacity on the simulated tidal fleet, for the CLI end-to-end tests."""

from __future__ import annotations

from pathlib import Path

import yaml


def capacity_args(tmp_path: Path, profiles) -> list[str]:
    """`--services FILE --policy FILE`: the fleet's ServiceProfiles (rate and SLO) and a policy enabling capacity."""
    services = tmp_path / "services.yaml"
    services.write_text(yaml.safe_dump({"apiVersion": "gputide/v1alpha1", "kind": "ServiceProfiles",
                                        "services": [{"name": p.name, "rpsPerReplica": p.rps_per_replica,
                                                      "latencySloSeconds": p.slo_latency_s}
                                                     for p in profiles.values()]}))
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"apiVersion": "gputide/v1alpha1", "kind": "BalancerPolicy",
                                      "metadata": {"name": "t"}, "spec": {"capacity": {"enabled": True}}}))
    return ["--services", str(services), "--policy", str(policy)]
