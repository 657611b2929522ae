"""Shared pieces of the bad-input tests: the error-message contract and hypothesis strategies for junk values.

The contract (balancer.errors.InputError): the message names the file (where there is one), the field, the
value and what is allowed. `assert_names_everything` checks exactly that on the exception object and its text.
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

from balancer.errors import InputError

# what a hand-edited YAML value can turn into: wrong types, NaN/inf, huge and negative numbers, nested junk
JUNK_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), -1, 10**400, "", "1e3", "true", "NaN"]),
)
JUNK = st.one_of(JUNK_SCALARS, st.lists(JUNK_SCALARS, max_size=3),
                 st.dictionaries(st.text(max_size=5), JUNK_SCALARS, max_size=3))
# YAML mapping keys that are not the expected strings (ints, None and booleans are all legal YAML keys)
ODD_KEYS = st.one_of(st.integers(-5, 5), st.none(), st.booleans(), st.text(min_size=1, max_size=10))


def assert_names_everything(exc: InputError, *, file: str | None, field: str | None = None) -> None:
    text = str(exc)
    assert "\n" not in text.strip(), "one line"
    if file is not None:
        assert exc.file == file and text.startswith(f"{file}: ")
    if field is not None:
        assert exc.field == field
    assert f"field '{exc.field}'" in text
    assert exc.allowed and f"allowed: {exc.allowed}" in text
    value = exc.value
    if isinstance(value, float) and math.isnan(value):
        assert "nan" in text
    else:
        assert repr(value) in text
