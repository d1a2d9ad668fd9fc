"""The oversell rate (``--oversellrate``): how far above ``max`` admission may go. Read, checked, written and
defaulted here only; the faces turn :class:`RateError` into their own kind of refusal."""

from __future__ import annotations

from fractions import Fraction

__all__ = ["DEFAULT_OVERSELL_RATE", "Rate", "RateError", "format_rate", "parse_rate", "validate_rate"]


class Rate(Fraction):
    """An oversell rate already checked: positive. Made by :func:`parse_rate` or :func:`validate_rate` only, so
    the levels of a pass that each take a rate check it once, at the first (a :class:`Rate` passes through)."""

    __slots__ = ()


DEFAULT_OVERSELL_RATE = Rate(2)
"""The controller's ``--oversellrate`` when none is given."""


class RateError(ValueError):
    """A rate that cannot be read, or is not positive; its text says which and what to write instead."""


def parse_rate(value: object) -> Rate:
    """A rate as an operator writes it: ``2``, ``1.5`` or ``3/2`` (a string or a number); :class:`RateError`
    otherwise."""
    if isinstance(value, bool):
        raise RateError(f"oversellrate {value!r} is not a number; use 1 (strictly by quota), 2 (the default) or a "
                        "fraction such as 1.5")
    try:
        rate = Rate(str(value).strip())
    except (ValueError, ZeroDivisionError):
        raise RateError(f"oversellrate {value!r} is not a number; use 1 (strictly by quota), 2 (the default) or a "
                        "fraction such as 1.5") from None
    if rate <= 0:
        raise RateError(f"oversellrate must be positive (1 = strictly by quota), got {value!r}")
    return rate


def validate_rate(oversell_rate: Fraction | int) -> Rate:
    """The rate as a :class:`Rate`; ``ValueError`` unless it is a positive number."""
    if type(oversell_rate) is Rate:
        return oversell_rate
    if isinstance(oversell_rate, bool) or not isinstance(oversell_rate, int | Fraction):
        raise ValueError(f"oversell rate must be an int or a Fraction, got {oversell_rate!r}")
    rate = Rate(oversell_rate)
    if rate <= 0:
        raise ValueError(f"oversell rate must be positive (1 = strictly by quota), got {rate}")
    return rate


def format_rate(rate: Fraction) -> str:
    """``1``, ``2``, ``1.5`` (exact decimals) or ``4/3`` (when no finite decimal is exact)."""
    if rate.denominator == 1:
        return str(rate.numerator)
    denominator = rate.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    if denominator != 1:
        return str(rate)
    digits = 1
    while (rate * 10**digits).denominator != 1:
        digits += 1
    text = str((rate * 10**digits).numerator).rjust(digits + 1, "0")
    return f"{text[:-digits]}.{text[-digits:]}"
