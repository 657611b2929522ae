"""BalancerPolicy files: defaults, every field settable, and errors that name field, value and what is allowed."""

from __future__ import annotations

from dataclasses import fields

import pytest
import yaml

from balancer import config
from balancer.errors import InputError


def doc(spec=None, **top):
    d = {"apiVersion": "gputide/v1alpha1", "kind": "BalancerPolicy", "metadata": {"name": "p"}, "spec": spec or {}}
    d.update(top)
    return d


def test_an_empty_spec_gives_the_defaults():
    p = config.from_dict(doc())
    assert p.name == "p"
    assert p.safety.max_concurrent_migrations_per_node == 2
    assert p.hotspots == config.HotspotPolicy()


def test_every_field_can_be_set_from_yaml(tmp_path):
    spec = {}
    for section, cls in config.SECTIONS.items():
        values = {}
        for f in fields(cls):
            d = f.default
            lo, hi = f.metadata["range"]
            if isinstance(d, bool):
                values[config.camel(f.name)] = not d
            elif isinstance(d, tuple):
                values[config.camel(f.name)] = ["a", "b"]
            elif isinstance(d, str):   # an IANA time zone
                values[config.camel(f.name)] = "Europe/Berlin"
            elif isinstance(d, int):
                values[config.camel(f.name)] = int(hi) if d != hi else int(lo)
            else:
                values[config.camel(f.name)] = float(hi) if d != hi else float(lo)
        spec[section] = values
    spec["hotspots"]["releaseMarginC"] = 60.0
    spec["colocation"]["sloSlack"] = 0.1
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc(spec)))
    p = config.load(path)
    for section, values in spec.items():
        got = getattr(p, section)
        for key, value in values.items():
            name = next(f.name for f in fields(got) if config.camel(f.name) == key)
            want = tuple(value) if isinstance(value, list) else value
            assert getattr(got, name) == want, f"{section}.{key}"


BAD = {
    "wrong apiVersion": (doc(apiVersion="v2"), "apiVersion", "gputide/v1alpha1"),
    "wrong kind": (doc(kind="Policy"), "kind", "BalancerPolicy"),
    "unknown section": (doc({"hotspot": {}}), "spec.hotspot", "one of the sections"),
    "unknown field": (doc({"safety": {"maxActions": 3}}), "spec.safety.maxActions", "maxActionsPerCycle"),
    "a negative budget": (doc({"safety": {"evictionBudget": -1}}), "spec.safety.evictionBudget", "an integer"),
    "a string where a number goes": (doc({"hotspots": {"marginC": "5"}}), "spec.hotspots.marginC", "a number"),
    "a float where an integer goes": (doc({"hotspots": {"hotReadings": 2.5}}), "spec.hotspots.hotReadings",
                                      "an integer from 1"),
    "a bool where a number goes": (doc({"placement": {"thermal": True}}), "spec.placement.thermal", "a number"),
    "a number where a bool goes": (doc({"throttling": {"enabled": 1}}), "spec.throttling.enabled", "true or false"),
    "overlapping hot and cool margins": (doc({"hotspots": {"marginC": 10, "releaseMarginC": 5}}),
                                         "spec.hotspots.releaseMarginC", "at least marginC"),
    "slack above pressure": (doc({"colocation": {"sloSlack": 0.9}}), "spec.colocation.sloSlack", "below sloPressure"),
    "a section that is not a mapping": (doc({"safety": [1]}), "spec.safety", "a mapping"),
}


@pytest.mark.parametrize("bad", BAD.values(), ids=list(BAD))
def test_invalid_policies_name_field_value_and_allowed(bad):
    d, field, allowed = bad
    with pytest.raises(InputError) as err:
        config.from_dict(d, "policy.yaml")
    assert err.value.field == field
    assert allowed in err.value.allowed
    assert "policy.yaml" in str(err.value)


def test_unreadable_and_unparseable_files_are_input_errors(tmp_path):
    with pytest.raises(InputError):
        config.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [unclosed")
    with pytest.raises(InputError):
        config.load(bad)


def test_the_reference_lists_every_field():
    ref = config.reference_markdown()
    for section, cls in config.SECTIONS.items():
        for f in fields(cls):
            assert f"`spec.{section}.{config.camel(f.name)}`" in ref
