"""Bad-input properties of the ServiceProfiles file (`gputide run --services`, `gputide calibrate --services`):
any junk in any field is an InputError naming file, field, value and what is allowed, or a valid profile."""

from __future__ import annotations

import math

import pytest
import yaml
from fuzz_helpers import JUNK, ODD_KEYS, assert_names_everything
from fuzzing import examples
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from balancer.app.capacity_run import load_profiles, profiles_from_dict
from balancer.errors import InputError

SETTINGS = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
GOOD = {"name": "chat", "rpsPerReplica": 10.0, "warmupSeconds": 300, "minReplicas": 1, "maxReplicas": 40,
        "gpusPerReplica": 1, "gpuModels": ["H100-SXM"], "homeReplicas": 4, "latencySloSeconds": 0.5}


def _doc(services) -> dict:
    return {"apiVersion": "gputide/v1alpha1", "kind": "ServiceProfiles", "services": services}


@SETTINGS
@given(st.sampled_from(sorted(GOOD)), JUNK)
@example(key="rpsPerReplica", value=10**400)   # float() of a huge integer overflowed
@example(key="minReplicas", value=10**400)
def test_any_junk_service_field_is_an_input_error_or_a_valid_profile(tmp_path_factory, key, value):
    path = tmp_path_factory.mktemp("services") / "services.yaml"
    path.write_text(yaml.safe_dump(_doc([{**GOOD, key: value}])))
    try:
        profiles = load_profiles(str(path))
    except InputError as exc:
        assert exc.file == str(path) and exc.field.startswith("services[0]")
        assert_names_everything(exc, file=str(path))
        return
    (profile,) = profiles.values()   # accepted: a legal value, and the profile holds finite numbers
    assert math.isfinite(profile.rps_per_replica) and profile.rps_per_replica > 0
    assert 0 <= profile.min_replicas <= profile.max_replicas


@SETTINGS
@given(ODD_KEYS.filter(lambda k: k not in GOOD), JUNK)
def test_unknown_service_keys_of_any_type_are_named(key, value):
    with pytest.raises(InputError) as info:
        profiles_from_dict(_doc([{**GOOD, key: value, "zzUnknown": 1}]), "s.yaml")
    assert "one of the fields" in info.value.allowed
