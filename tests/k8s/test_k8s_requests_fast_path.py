"""The fast path of pod requests (balancer/actuate/k8s_requests.py) counts exactly what the exact one counts.

A pod's requests are summed in integers of billionths, the common quantity forms ("8", "500m", "1.5", "64Gi") read
by integer arithmetic, and rounded once; the exact path reads every quantity as a Fraction (`_exact_quantity`) and
sums fractions. On random quantities of every form (each decimal SI and binary suffix, fractions, exponents,
signs, spaces, ints and floats, floats finer than a billionth) and random pods (containers, sidecars, init
containers, pod-level resources, overhead), both give the same numbers, the same rounding up and down, and the
same refusals.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from balancer.actuate.k8s_requests import (
    _common_nanos,
    _effective,
    _exact_quantity,
    _nanos,
    basic_requests,
    effective_requests,
    exact_quantity,
    pod_requests,
)
from balancer.actuate.kubernetes import GPU_RESOURCE, KubePermanentError

SUFFIXES = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]

digits = st.text("0123456789", min_size=1, max_size=22)
common = st.builds(lambda whole, fraction, suffix: f"{whole}{'.' + fraction if fraction else ''}{suffix}",
                   digits, st.none() | digits, st.sampled_from(SUFFIXES))
# the rest of the grammar, which the fast path leaves to the exact one: signs, exponents, ".5", "5.", spaces
other = st.builds(lambda sign, whole, point, fraction, suffix, pad: f"{pad}{sign}{whole}{point}{fraction}{suffix}{pad}",
                  st.sampled_from(["", "+", "-"]), st.sampled_from(["", "0", "7", "12"]) | digits,
                  st.sampled_from(["", "."]), st.sampled_from(["", "5", "25"]) | digits,
                  st.sampled_from([*SUFFIXES, "e3", "E-4", "e+12", "e-30", "K", "GB", "e", "1"]),
                  st.sampled_from(["", " "]))
numbers = (st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=False, allow_infinity=False)
           | st.sampled_from([0.1, 1e-12, 2.5e-10, 1.5, 1e300]))
quantities = common | other | numbers


@settings(max_examples=1000, deadline=None)
@given(common)
@example("9223372036854775807.999999999Ei")   # capped at 2^63-1
@example("1.0000000001n")                     # rounded up to a billionth
@example("000.5Mi")
def test_the_common_forms_are_read_as_the_exact_parse_reads_them(text) -> None:
    assert _common_nanos(text) == _exact_quantity(text) * 10**9


@settings(max_examples=1000, deadline=None)
@given(quantities)
@example(1e-12)   # finer than a billionth: not a whole number of them, left to the fractions
@example(True)
def test_every_quantity_in_billionths_is_the_exact_quantity_or_refused_by_both(value) -> None:
    _billionths_match_the_exact_quantity(value)


def _billionths_match_the_exact_quantity(value) -> None:
    try:
        exact = _exact_quantity(value)
    except KubePermanentError:
        with pytest.raises(KubePermanentError):
            _nanos(value)
        return
    nanos = _nanos(value)
    assert nanos == exact * 10**9 if (exact * 10**9).denominator == 1 else nanos is None


def test_every_form_of_the_grammar_is_read_alike_by_both_paths() -> None:
    """Each sign, digits before and after the point, point, suffix and padding together (2,592 strings, in a
    fraction of a second): every form is checked however few random examples the tests above draw."""
    for sign, whole, point, fraction, suffix, pad in itertools.product(
            ["", "+", "-"], ["", "0", "12"], ["", "."], ["", "5", "000000000001"],
            [*SUFFIXES, "e3", "E-4", "e+12", "e-30", "K", "GB", "e", "1"], ["", " "]):
        text = f"{pad}{sign}{whole}{point}{fraction}{suffix}{pad}"
        _billionths_match_the_exact_quantity(text)
        if not (sign or pad) and whole and (fraction or not point) and suffix in SUFFIXES:
            assert _common_nanos(text) == _exact_quantity(text) * 10**9, text


resources = st.dictionaries(st.sampled_from(["cpu", "memory", GPU_RESOURCE, "hugepages-2Mi", "example.com/rdma"]),
                            quantities, max_size=4)
containers = st.lists(st.fixed_dictionaries({}, optional={"limits": resources, "requests": resources}).map(
    lambda res: {"name": "c", "resources": res}), max_size=3)
init_containers = st.lists(st.tuples(containers.map(lambda cs: cs[0] if cs else {"name": "i"}), st.booleans()).map(
    lambda c: {**c[0], "restartPolicy": "Always"} if c[1] else c[0]), max_size=3)
pods = st.builds(lambda name, cs, inits, level, overhead: {
    "metadata": {"name": name, "namespace": "ns"} if name else {},
    "spec": {"containers": cs, "initContainers": inits, **({"resources": level} if level else {}),
             **({"overhead": overhead} if overhead else {})}},
    st.sampled_from(["", "p"]), containers, init_containers,
    st.none() | st.fixed_dictionaries({}, optional={"limits": resources, "requests": resources}),
    st.none() | resources)


def _outcome(fn, pod):
    try:
        return fn(pod)
    except KubePermanentError as err:
        return str(err)


def _plain_rule(pod) -> dict:
    """kube-scheduler's rule written out plainly over `exact_quantity`'s fractions: containers and sidecars summed,
    or the init phase if more, a request defaulting to its limit; pod-level CPU, memory and hugepages requests
    (or limits, where no container asks) in their stead; plus the overhead."""
    spec = pod["spec"]

    def need(c):
        res = c.get("resources") or {}
        return {k: exact_quantity(v) for k, v in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items()}

    def add(*parts):
        return {k: sum(p.get(k, 0) for p in parts) for p in parts for k in p}

    sidecars = [need(c) for c in spec["initContainers"] if c.get("restartPolicy") == "Always"]
    total, started = add(*map(need, spec["containers"]), *sidecars), {}
    for c in spec["initContainers"]:
        phase = add(started, need(c))
        if c.get("restartPolicy") == "Always":
            started = phase
        total |= {k: max(total.get(k, 0), 0, v) for k, v in phase.items()}   # a phase holds no less than 0
    level = spec.get("resources") or {}
    own = {k: exact_quantity(v) for k, v in (level.get("requests") or {}).items() if k in ("cpu", "memory")
           or k.startswith("hugepages-")}
    own |= {k: exact_quantity(v) for k, v in (level.get("limits") or {}).items()
            if (k in ("cpu", "memory") or k.startswith("hugepages-")) and k not in own and k not in total}
    return add(total | own, {k: exact_quantity(v) for k, v in (spec.get("overhead") or {}).items()})


@settings(max_examples=200, deadline=None)
@given(pods)
@example({"metadata": {"name": "p", "namespace": "ns"},    # refused where a pod-level limit stands for a request
          "spec": {"containers": [], "initContainers": [], "resources": {"limits": {"memory": "1e"}}}})
@example({"metadata": {}, "spec": {"containers": [], "initContainers": [], "overhead": {"cpu": "8GB"}}})
def test_a_pods_requests_are_what_the_fractions_sum_to(pod) -> None:
    exact = _outcome(lambda p: _effective(p, exact_quantity), pod)
    assert _outcome(effective_requests, pod) == exact
    assert _outcome(pod_requests, pod) == (exact if isinstance(exact, str) else basic_requests(exact))
    if not isinstance(exact, str):
        assert exact == _plain_rule(pod)
        assert pod_requests(pod) == (math.ceil(exact.get(GPU_RESOURCE, 0)), math.ceil(exact.get("cpu", 0) * 1000),
                                     math.ceil(exact.get("memory", 0) / 2**20))   # rounded up, as fractions


@pytest.mark.parametrize(("where", "field"), [
    ({"containers": [{"name": "a", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "x"}}}]},
     r"spec\.containers\[0\]\.resources\.requests\.cpu"),
    ({"containers": [{"name": "a"}, {"name": "b", "resources": {"limits": {"memory": "x"}}}]},
     r"spec\.containers\[1\]\.resources\.limits\.memory"),
    ({"initContainers": [{"name": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "x"}}}]},
     r"spec\.initContainers\[0\]\.resources\.requests\.cpu"),
    ({"resources": {"requests": {"cpu": "x"}}}, r"spec\.resources\.requests\.cpu"),
    ({"resources": {"limits": {"memory": "x"}}}, r"spec\.resources\.limits\.memory"),
    ({"overhead": {"cpu": "x"}}, r"spec\.overhead\.cpu"),
])
def test_a_refusal_names_the_field_on_either_path(where, field) -> None:
    for fn in (effective_requests, pod_requests):
        with pytest.raises(KubePermanentError, match=rf"^pod ns/p: {field}: invalid quantity 'x'"):
            fn({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [], **where}})
    with pytest.raises(KubePermanentError, match=rf"^pod template: {field}: "):
        pod_requests({"spec": {"containers": [], **where}})


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["cpu", "memory", GPU_RESOURCE]),
                       numbers | st.fractions() | quantities.filter(lambda q: not isinstance(q, str)).map(Fraction)),
       st.booleans())
def test_rounding_is_exact_up_and_down(total, down) -> None:
    whole = math.floor if down else math.ceil

    def exact(v):
        return Fraction(repr(v)) if isinstance(v, float) else Fraction(v)

    assert basic_requests(total, down=down) == (whole(exact(total.get(GPU_RESOURCE, 0))),
                                                whole(exact(total.get("cpu", 0)) * 1000),
                                                whole(exact(total.get("memory", 0)) / 2**20))
