"""A collection tag on the wrong kind of node (`!!map [1]`, `!!set [a]`, `!!omap` ...) is an InputError at the value,
as a scalar its tag cannot hold is (aa6716d). PyYAML builds a mapping or a set in a generator that it resumes after
the value's `construct_object` has returned, so the TypeError its `construct_mapping` raises on a sequence node came
out of `construct_document`, past `BoundedLoader`'s conversion: gputide run and gputide check died with a traceback
(exit 1) and a reload raised out of `PolicyReloader.poll()` after recording the file as seen."""

from __future__ import annotations

import os

import pytest
from prometheus_client import CollectorRegistry

from balancer import config
from balancer.app.policy_reload import PolicyReloader
from balancer.cli import main
from balancer.errors import InputError
from balancer.yamlfile import parse_yaml

HEAD = "apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\nmetadata: {name: p}\n"


def _write(path, text: str) -> None:
    path.write_text(text)
    st = os.stat(path)   # two writes within one clock tick must still read as a change
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


@pytest.mark.parametrize("tag", ["!!map", "!!set"])
def test_a_collection_tag_on_a_sequence_is_refused_at_start_at_reload_and_by_check(tmp_path, capsys, tag):
    path = tmp_path / "policy.yaml"
    _write(path, HEAD + "spec:\n  safety: {evictionBudget: 20}\n")
    reg = CollectorRegistry()
    r = PolicyReloader(path, config.load(path), registry=reg)
    _write(path, HEAD + f"spec:\n  safety: {tag} [1]\n")
    with pytest.raises(InputError) as start:
        config.load(path)
    assert r.poll() is None and r.current.safety.eviction_budget == 20
    assert reg.get_sample_value("gputide_policy_last_reload_successful") == 0
    assert main(["check", str(path)]) == 2
    for text in (str(start.value), r.last_error, capsys.readouterr().err):
        assert "policy.yaml" in text and f"is not a valid {tag}" in text and "line 5" in text, text


@pytest.mark.parametrize("text", ["a: !!map [1]", "a: !!set [1]", "- !!map [b]", "!!map [1]", "a: {b: !!set [c]}"])
def test_every_document_read_raises_an_input_error(text):
    for every in (False, True):
        with pytest.raises(InputError):
            parse_yaml(text, "f.yaml", every=every)
