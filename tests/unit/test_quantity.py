"""Kubernetes quantities: parsing (the apimachinery grammar), canonical formatting and round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.core.quantity import NANO, QuantityError, format_quantity, parse_quantity, to_float, units

KI = 1024
MI = 1024**2
GI = 1024**3


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("0", 0),
        ("1", NANO),
        ("100m", 100_000_000),
        ("1.5", 1_500_000_000),
        ("1e3", 1000 * NANO),
        ("1E3", 1000 * NANO),
        ("1E-3", 1_000_000),
        ("1e+2", 100 * NANO),
        ("2k", 2000 * NANO),
        ("3M", 3 * 10**6 * NANO),
        ("1G", 10**9 * NANO),
        ("1T", 10**12 * NANO),
        ("1P", 10**15 * NANO),
        ("2E", 2 * 10**18 * NANO),  # exa, not an exponent
        ("10Gi", 10 * GI * NANO),
        ("500Mi", 500 * MI * NANO),
        ("1Ki", KI * NANO),
        ("1Ti", 1024**4 * NANO),
        ("1Pi", 1024**5 * NANO),
        ("1Ei", 1024**6 * NANO),
        ("1.5Gi", 3 * GI // 2 * NANO),
        (".5", NANO // 2),
        ("1.", NANO),
        ("+1", NANO),
        ("-1", -NANO),
        ("-.5", -NANO // 2),
        ("5u", 5000),
        ("7n", 7),
        ("0.1n", 1),  # finer than a nano-unit rounds up
        ("1.0001n", 2),
        ("-0.1n", -1),  # ... away from zero, like Kubernetes' inf.RoundUp
        ("0.5m", 500_000),
        ("007", 7 * NANO),
        (10, 10 * NANO),
        (0, 0),
        (-3, -3 * NANO),
    ],
)
def test_parse_quantity_accepts_the_kubernetes_grammar(text: str | int, nanos: int) -> None:
    assert parse_quantity(text) == nanos


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "empty"),
        ("abc", "expected a number"),
        ("1.2.3", "expected a number"),
        ("10Gb", "expected a number"),
        ("10gi", "expected a number"),
        ("1ki", "expected a number"),
        ("1e", "expected a number"),
        ("1e1.5", "expected a number"),
        ("Gi", "expected a number"),
        (".", "expected a number"),
        ("--1", "expected a number"),
        ("1 Gi", "expected a number"),
        ("0x10", "expected a number"),
        ("١٠", "expected a number"),  # Arabic-Indic digits are not ASCII digits
        (" 1", "spaces"),
        ("1\n", "spaces"),
        ("1e999", "out of range"),
        ("1e-31", "out of range"),
        ("1" * 5000, "too many digits"),
        (True, "boolean"),
        (False, "boolean"),
        (1.5, "float"),
        (None, "NoneType"),
        ([1], "list"),
    ],
)
def test_parse_quantity_rejects_bad_values_naming_them(value: object, why: str) -> None:
    with pytest.raises(QuantityError) as caught:
        parse_quantity(value)  # type: ignore[arg-type]
    message = str(caught.value)
    assert why in message
    assert caught.value.text is value
    if isinstance(value, str) and len(value) < 100:
        assert repr(value) in message


def test_a_rejected_float_is_quoted_back_in_the_message() -> None:
    with pytest.raises(QuantityError, match=r"1\.5.*write the quantity as a string such as \"1\.5\""):
        parse_quantity(1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("nanos", "binary", "text"),
    [
        (0, False, "0"),
        (0, True, "0"),
        (NANO, False, "1"),
        (1500 * NANO, False, "1500"),
        (2000 * NANO, False, "2k"),
        (10**6 * NANO, False, "1M"),
        (10**18 * NANO, False, "1E"),
        (100_000_000, False, "100m"),
        (1_500_000_000, False, "1500m"),
        (5000, False, "5u"),
        (7, False, "7n"),
        (-NANO, False, "-1"),
        (-100_000_000, False, "-100m"),
        (10 * GI * NANO, True, "10Gi"),
        (10 * GI * NANO, False, "10737418240"),
        (3 * GI // 2 * NANO, True, "1536Mi"),
        (KI * NANO, True, "1Ki"),
        (1024**6 * NANO, True, "1Ei"),
        (1000 * NANO, True, "1k"),  # not a multiple of 1024: falls back to decimal
        (500_000_000, True, "500m"),
        (-2 * GI * NANO, True, "-2Gi"),
    ],
)
def test_format_quantity_is_canonical(nanos: int, binary: bool, text: str) -> None:
    assert format_quantity(nanos, binary) == text


quantities = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=-(10**6), max_value=10**6).map(lambda n: n * NANO),
    st.integers(min_value=-(10**6), max_value=10**6).map(lambda n: n * MI * NANO),
)


@given(nanos=quantities, binary=st.booleans())
def test_format_then_parse_is_the_identity(nanos: int, binary: bool) -> None:
    assert parse_quantity(format_quantity(nanos, binary)) == nanos


@given(
    sign=st.sampled_from(["", "+", "-"]),
    whole=st.integers(min_value=0, max_value=10**12),
    fraction=st.one_of(st.none(), st.integers(min_value=0, max_value=999_999)),
    suffix=st.sampled_from(["", "n", "u", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e3", "E-2"]),
    binary=st.booleans(),
)
def test_parse_then_format_then_parse_is_stable(
    sign: str, whole: int, fraction: int | None, suffix: str, binary: bool
) -> None:
    text = f"{sign}{whole}" + ("" if fraction is None else f".{fraction}") + suffix
    nanos = parse_quantity(text)
    canonical = format_quantity(nanos, binary)
    assert parse_quantity(canonical) == nanos
    assert format_quantity(parse_quantity(canonical), binary) == canonical


def test_to_float_and_units_helpers() -> None:
    assert to_float(1_500_000_000) == 1.5
    assert units(10) == 10 * NANO
    assert units("10Gi") == 10 * GI * NANO
