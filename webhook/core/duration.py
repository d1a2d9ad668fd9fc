"""One parser for every duration the project reads, exact (``Fraction`` seconds).

Three places read durations with three grammars, and each keeps its own on purpose:

* ResourcePolicy ``timeout`` and the controller's duration flags follow Go's ``time.ParseDuration``
  (:data:`GO`): ``30s``, ``1h30m``, ``1.5h``, ``500ms``, ``+2m``, ``0``;
* scenario files for the simulator (:data:`SCENARIO`) add days (``2d``) and bare seconds (``12``);
* ``kq logs --since`` (:data:`CLOCK`) takes whole ``h``/``m``/``s`` in that order, or bare whole seconds.

A :class:`DurationGrammar` names what a caller accepts; :func:`parse_duration` is the one implementation.
Arithmetic is exact, so ``1h2m3.5s`` is exactly ``7447/2`` seconds and callers round once, their own way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

UNIT_SECONDS: dict[str, Fraction] = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "µs": Fraction(1, 10**6),  # MICRO SIGN, as Go accepts
    "μs": Fraction(1, 10**6),  # GREEK SMALL LETTER MU, as Go accepts
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
    "d": Fraction(86400),
}
"""Seconds in each unit any grammar may allow."""

_DECIMAL = r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+"
_WHOLE = r"[0-9]+"


class DurationError(ValueError):
    """Text that is not a duration in the grammar asked for (callers turn it into their own message)."""


@dataclass(frozen=True)
class DurationGrammar:
    """What a caller accepts; the text is a sequence of ``<number><unit>`` parts, summed."""

    units: tuple[str, ...] = ("ns", "us", "µs", "μs", "ms", "s", "m", "h")
    """Allowed unit suffixes (keys of :data:`UNIT_SECONDS`)."""
    decimals: bool = True
    """Numbers may have a fraction (``1.5h``, ``.5s``); else whole numbers only."""
    bare_seconds: bool = False
    """A number with no unit is seconds (``"0"`` is always accepted, as in Go)."""
    plus_sign: bool = False
    """A leading ``+`` is allowed (Go's grammar)."""
    ordered: bool = False
    """Units come largest first, each at most once (``1h30m``, not ``30m1h`` or ``1m1m``)."""

    def __post_init__(self) -> None:
        unknown = set(self.units) - UNIT_SECONDS.keys()
        if unknown:
            raise ValueError(f"unknown duration units {sorted(unknown)}")

    def part_pattern(self) -> re.Pattern[str]:
        """One ``<number><unit>`` part (longest unit names first, so ``ms`` is not read as ``m``)."""
        units = "|".join(re.escape(unit) for unit in sorted(self.units, key=len, reverse=True))
        return re.compile(rf"({_DECIMAL if self.decimals else _WHOLE})({units})")


GO = DurationGrammar(plus_sign=True)
"""Go's ``time.ParseDuration`` without negatives."""
SCENARIO = DurationGrammar(units=("ns", "us", "µs", "ms", "s", "m", "h", "d"), bare_seconds=True)
"""Simulator scenario files: Go's units (micro sign only) plus days, and bare seconds."""
CLOCK = DurationGrammar(units=("h", "m", "s"), decimals=False, bare_seconds=True, ordered=True)
"""Whole hours, minutes and seconds as people write them on a command line: ``90``, ``5m``, ``1h30m``."""


def parse_duration(text: str, grammar: DurationGrammar = GO) -> Fraction:
    """Exact seconds in ``text`` (not stripped: callers decide about blanks).

    Raises :class:`DurationError` for text outside ``grammar``, and for negative durations (no grammar has
    them; the message says so).
    """
    if text == "0":
        return Fraction(0)
    if text.startswith("-"):
        raise DurationError(f"duration {text!r} must not be negative")
    body = text.removeprefix("+") if grammar.plus_sign else text
    if grammar.bare_seconds and re.fullmatch(_DECIMAL if grammar.decimals else _WHOLE, body):
        return Fraction(body)
    pattern = grammar.part_pattern()
    total, position, last_rank = Fraction(0), 0, None
    while position < len(body):
        match = pattern.match(body, position)
        if match is None:
            break
        seconds = UNIT_SECONDS[match[2]]
        if grammar.ordered and last_rank is not None and seconds >= last_rank:
            break
        total += Fraction(match[1]) * seconds
        position, last_rank = match.end(), seconds
    if not body or position != len(body):
        raise DurationError(f"duration {text!r} is not a number with a unit ({', '.join(grammar.units)})")
    return total
