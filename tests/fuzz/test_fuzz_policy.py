"""Bad-input properties of the BalancerPolicy file (balancer.config): every bad value is an InputError naming the
file, the field path, the value and what is allowed; every valid document round-trips through YAML."""

from __future__ import annotations

import math
import re
import zoneinfo
from dataclasses import fields

import pytest
import yaml
from fuzz_helpers import JUNK, ODD_KEYS, assert_names_everything
from fuzzing import examples
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from balancer import config
from balancer.errors import InputError, printable

FIELDS = [(sec, f) for sec, cls in config.SECTIONS.items() for f in fields(cls)]
NAMESPACE = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
SETTINGS = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _doc(spec: dict) -> dict:
    return {"apiVersion": config.API_VERSION, "kind": config.KIND, "metadata": {"name": "fuzz"}, "spec": spec}


def _valid_value(f) -> st.SearchStrategy:
    d = f.default
    lo, hi = f.metadata["range"]
    if isinstance(d, bool):
        return st.booleans()
    if isinstance(d, tuple):   # namespace names (DNS labels), each once
        return st.lists(st.from_regex(NAMESPACE, fullmatch=True).filter(lambda n: len(n) <= 63), max_size=3,
                        unique=True)
    if isinstance(d, str):     # an IANA time zone
        return st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"])
    if isinstance(d, int):
        return st.integers(int(lo), int(min(hi, 10**6)))
    return st.floats(lo, hi, allow_nan=False)


def _is_valid(f, value) -> bool:
    d = f.default
    lo, hi = f.metadata["range"]
    if isinstance(d, bool):
        return isinstance(value, bool)
    if isinstance(d, tuple):
        return (isinstance(value, list) and all(isinstance(v, str) and re.fullmatch(NAMESPACE, v) and len(v) <= 63
                                                for v in value) and len(set(value)) == len(value))
    if isinstance(d, str):
        return isinstance(value, str) and value in zoneinfo.available_timezones()
    if isinstance(value, bool):
        return False
    if isinstance(d, int):
        return isinstance(value, int) and lo <= value <= hi
    return isinstance(value, int | float) and not (isinstance(value, float) and math.isnan(value)) and lo <= value <= hi


@st.composite
def one_field(draw, valid: bool):
    sec, f = draw(st.sampled_from(FIELDS))
    if valid:
        return sec, f, draw(_valid_value(f))
    value = draw(JUNK.filter(lambda v: not _is_valid(f, v)))
    return sec, f, value


@SETTINGS
@given(one_field(valid=False))
def test_any_bad_field_value_is_an_input_error_naming_file_field_value_and_allowed(tmp_path_factory, case):
    sec, f, value = case
    path = tmp_path_factory.mktemp("policy") / "bad.yaml"
    path.write_text(yaml.safe_dump(_doc({sec: {config.camel(f.name): value}})))
    with pytest.raises(InputError) as info:
        config.load(path)
    assert_names_everything(info.value, file=str(path), field=f"spec.{sec}.{config.camel(f.name)}")


@SETTINGS
@given(st.dictionaries(st.sampled_from(FIELDS), st.none(), min_size=1, max_size=6).flatmap(
    lambda keys: st.tuples(*[_valid_value(f).map(lambda v, s=s, f=f: (s, f, v)) for s, f in keys])))
def test_valid_documents_round_trip_through_yaml(triples):
    spec: dict = {}
    for sec, f, value in triples:
        spec.setdefault(sec, {})[config.camel(f.name)] = value
    hs = spec.get("hotspots", {})
    if hs.get("releaseMarginC", 12.0) < hs.get("marginC", 5.0):
        hs["releaseMarginC"] = hs.get("marginC", 5.0)
    co = spec.get("colocation", {})
    if co.get("sloSlack", 0.5) >= co.get("sloPressure", 0.8):
        co["sloSlack"] = co.get("sloPressure", 0.8) / 2
    policy = config.from_dict(yaml.safe_load(yaml.safe_dump(_doc(spec))))
    for sec, values in spec.items():
        section = getattr(policy, sec)
        for key, value in values.items():
            name = next(f.name for f in fields(section) if config.camel(f.name) == key)
            got = getattr(section, name)
            assert got == (tuple(value) if isinstance(value, list) else value)


@SETTINGS
@given(ODD_KEYS.filter(lambda k: k not in config.SECTIONS), JUNK)
def test_unknown_sections_of_any_key_type_are_named(key, value):
    with pytest.raises(InputError) as info:
        config.from_dict(_doc({key: value, "zz-unknown": 1}), "p.yaml")
    assert info.value.field.startswith("spec.")
    assert "one of the sections" in info.value.allowed


@SETTINGS
@given(st.sampled_from(list(config.SECTIONS)), ODD_KEYS, JUNK)
@example("hotspots", "\n", None)  # found by hypothesis: the key's newline broke the one-line message
def test_unknown_fields_of_any_key_type_are_named(section, key, value):
    known = {config.camel(f.name) for f in fields(config.SECTIONS[section])}
    if key in known:
        return
    with pytest.raises(InputError) as info:
        config.from_dict(_doc({section: {key: value}}), "p.yaml")
    assert_names_everything(info.value, file="p.yaml", field=printable(f"spec.{section}.{key}"))


@SETTINGS
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_a_policy_or_an_input_error(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("policy") / "blob.yaml"
    path.write_bytes(blob)
    try:
        config.load(path)
    except InputError as exc:
        assert exc.file == str(path)


@pytest.mark.parametrize("doc, field", [
    pytest.param([1, 2], "(document)", id="a list instead of a mapping"),
    pytest.param({"apiVersion": "v2", "kind": config.KIND}, "apiVersion", id="wrong apiVersion"),
    pytest.param({"apiVersion": config.API_VERSION, "kind": "Fleet"}, "kind", id="wrong kind"),
    pytest.param(_doc([1]), "spec", id="spec is a list"),
    pytest.param(_doc({"safety": 3}), "spec.safety", id="a section is a number"),
    pytest.param(_doc({"hotspots": {"marginC": float("nan")}}), "spec.hotspots.marginC", id="NaN margin"),
    pytest.param(_doc({1: 2, "x": 3}), "spec.1", id="int and str unknown sections together"),
    pytest.param(_doc({"hotspots": {"marginC": 10, "releaseMarginC": 8}}), "spec.hotspots.releaseMarginC",
                 id="hot and cool bands overlap"),
])
def test_named_bad_documents(doc, field):
    with pytest.raises(InputError) as info:
        config.from_dict(doc, "named.yaml")
    assert_names_everything(info.value, file="named.yaml", field=field)


def test_a_non_utf8_file_is_an_input_error(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("apiVersion: gputide/v1alpha1  # café".encode("latin-1"))
    with pytest.raises(InputError, match="UTF-8"):
        config.load(path)
