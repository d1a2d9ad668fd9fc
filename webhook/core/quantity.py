"""Exact Kubernetes resource quantities.

A quantity is held as an ``int`` count of nano-units (``1`` CPU == ``10**9``, ``1Ki`` of memory ==
``1024 * 10**9``), so arithmetic is exact integer arithmetic with no float drift. Parsing follows the
grammar of ``k8s.io/apimachinery/pkg/api/resource``::

    <quantity>        ::= <signedNumber><suffix>
    <signedNumber>    ::= [+-]? (<digits> | <digits>.<digits> | <digits>. | .<digits>)
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= (e | E) <signedInteger>

Like Kubernetes (``inf.RoundUp``), precision finer than one nano-unit is rounded away from zero:
``0.1n`` is ``1n`` and ``-0.1n`` is ``-1n``. Only ASCII digits are accepted, with no surrounding spaces.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction

NANO = 10**9
"""Nano-units in one whole unit."""

_BINARY: dict[str, int] = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: dict[str, Fraction] = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_PATTERN = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exp>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))",
    re.ASCII,
)
_MAX_DIGITS = 64
"""Longest number part accepted (digits and point): far beyond any real quantity, short enough to stay cheap."""
_MAX_EXPONENT = 30
"""Largest decimal exponent accepted (``1e30``); larger values are almost surely typos."""
PARSED_KEPT = 4096
"""Distinct quantity texts whose parsed value is kept (the least recently used go first)."""


class QuantityError(ValueError):
    """A string that is not a valid Kubernetes quantity."""

    def __init__(self, text: object, why: str) -> None:
        self.text = text
        self.why = why
        super().__init__(f"invalid quantity {text!r}: {why}")


def parse_quantity(value: str | int) -> int:
    """Parse a Kubernetes quantity into nano-units.

    ``int`` values (as YAML produces for ``cpu: 10``) are whole units. ``bool`` and ``float`` are refused:
    floats cannot carry exact quantities; write them as strings.
    """
    if type(value) is str:
        return _parse_text(value)
    if isinstance(value, bool):
        raise QuantityError(value, "a boolean is not a quantity")
    if isinstance(value, int):
        return value * NANO
    if isinstance(value, float):
        raise QuantityError(value, f"a float is not exact; write the quantity as a string such as \"{value}\"")
    if not isinstance(value, str):
        raise QuantityError(value, f"expected a string or an integer, got {type(value).__name__}")
    return _parse_text(value)


@functools.lru_cache(maxsize=PARSED_KEPT)
def _parse_text(value: str) -> int:
    """:func:`parse_quantity` of a string. Jobs repeat a few quantities, so the answers are kept (a refusal
    raises and is not kept)."""
    text = value
    if not text:
        raise QuantityError(value, "empty string")
    if text != text.strip():
        raise QuantityError(value, "remove the spaces around the quantity")
    match = _PATTERN.fullmatch(text)
    if match is None:
        raise QuantityError(
            value, "expected a number with an optional suffix such as 100m, 1.5, 2k, 10Gi, 500Mi or 1e3"
        )
    if len(match["number"]) > _MAX_DIGITS:
        raise QuantityError(value, f"too many digits (at most {_MAX_DIGITS})")
    number = Fraction(match["number"] if not match["number"].endswith(".") else match["number"][:-1])
    if match["binary"]:
        scaled = number * _BINARY[match["binary"]]
    elif match["exp"] is not None:
        exponent = int(match["exp"])
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(value, f"exponent {exponent} is out of range (at most ±{_MAX_EXPONENT})")
        scaled = number * Fraction(10) ** exponent
    else:
        scaled = number * _DECIMAL[match["decimal"] or ""]
    nanos = scaled * NANO
    # Round the magnitude up to whole nano-units (away from zero), as Kubernetes does.
    whole = -((-nanos.numerator) // nanos.denominator)
    return -whole if match["sign"] == "-" else whole


_BINARY_DESC = sorted(_BINARY.items(), key=lambda item: -item[1])
_DECIMAL_UP = [("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)]
_DECIMAL_DOWN = [("m", 10**6), ("u", 10**3), ("n", 1)]


def format_quantity(nanos: int, binary: bool = False) -> str:
    """The canonical text of a quantity given in nano-units; ``parse_quantity`` inverts it exactly.

    ``binary`` prefers ``Ki``/``Mi``/``Gi``... suffixes (for memory and storage) when the value is a whole
    multiple of 1024; otherwise the largest exact decimal suffix is used.
    """
    if nanos < 0:
        return "-" + format_quantity(-nanos, binary)
    if nanos == 0:
        return "0"
    if nanos % NANO == 0:
        whole = nanos // NANO
        if binary:
            for suffix, factor in _BINARY_DESC:
                if whole % factor == 0:
                    return f"{whole // factor}{suffix}"
        for suffix, factor in _DECIMAL_UP:
            if whole % factor == 0:
                return f"{whole // factor}{suffix}"
        return str(whole)
    for suffix, factor in _DECIMAL_DOWN:
        if nanos % factor == 0:
            return f"{nanos // factor}{suffix}"
    raise AssertionError("unreachable: every integer is a multiple of 1")  # pragma: no cover


def to_float(nanos: int) -> float:
    """Whole units as a float, for metrics and display only (never for decisions)."""
    return nanos / NANO


def units(whole: int | str) -> int:
    """Shorthand for tests and builders: ``units(10)`` is 10 whole units, ``units("10Gi")`` parses."""
    return parse_quantity(whole)
