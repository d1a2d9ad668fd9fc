"""The one duration parser (webhook/core/duration.py): exact seconds, per grammar."""

from __future__ import annotations

from fractions import Fraction

import pytest

from webhook.core.duration import CLOCK, GO, SCENARIO, DurationError, DurationGrammar, parse_duration

F = Fraction


@pytest.mark.parametrize(
    ("grammar", "text", "seconds"),
    [
        (GO, "0", F(0)),
        (GO, "30s", F(30)),
        (GO, "1h30m", F(5400)),
        (GO, "1.5h", F(5400)),
        (GO, "+2m", F(120)),
        (GO, "500ms", F(1, 2)),
        (GO, ".5s", F(1, 2)),
        (GO, "1.s", F(1)),
        (GO, "10us", F(1, 100_000)),
        (GO, "10µs", F(1, 100_000)),
        (GO, "10μs", F(1, 100_000)),
        (GO, "3ns", F(3, 10**9)),
        (GO, "1m1m", F(120)),  # Go sums any sequence of parts
        (GO, "30m1h", F(5400)),
        (GO, "1h2m3.5s", F(7447, 2)),  # exact, no float drift
        (SCENARIO, "2d", F(172_800)),
        (SCENARIO, "12", F(12)),
        (SCENARIO, "1.25", F(5, 4)),
        (SCENARIO, "1500ns", F(3, 2_000_000)),
        (SCENARIO, "250µs", F(1, 4000)),
        (CLOCK, "0", F(0)),
        (CLOCK, "30", F(30)),
        (CLOCK, "90s", F(90)),
        (CLOCK, "1h30m", F(5400)),
        (CLOCK, "1h0m5s", F(3605)),
        (DurationGrammar(units=("m",)), "3m", F(180)),
    ],
)
def test_parses_exact_seconds(grammar: DurationGrammar, text: str, seconds: Fraction) -> None:
    assert parse_duration(text, grammar) == seconds


@pytest.mark.parametrize(
    ("grammar", "text"),
    [
        (GO, ""),
        (GO, "1"),  # only "0" goes without a unit
        (GO, "m"),
        (GO, "+"),
        (GO, "s1"),
        (GO, "1.2.3s"),
        (GO, "1d"),  # no days in Go
        (GO, "1m 30s"),
        (GO, " 1m"),  # blanks are the caller's business
        (GO, "١s"),  # ASCII digits only, as Go
        (SCENARIO, "+5s"),
        (SCENARIO, "10μs"),  # the micro sign only
        (SCENARIO, "1s2"),
        (CLOCK, "1.5h"),  # whole numbers
        (CLOCK, "1.5"),
        (CLOCK, "30m1h"),  # largest unit first
        (CLOCK, "5m5m"),  # each unit once
        (CLOCK, "500ms"),
        (CLOCK, "1d"),
        (CLOCK, "+5s"),
        (CLOCK, "5x"),
    ],
)
def test_refuses_text_outside_the_grammar(grammar: DurationGrammar, text: str) -> None:
    with pytest.raises(DurationError, match="is not a number with a unit"):
        parse_duration(text, grammar)


@pytest.mark.parametrize("grammar", [GO, SCENARIO, CLOCK])
@pytest.mark.parametrize("text", ["-1s", "-0", "-5"])
def test_no_grammar_takes_a_negative_duration(grammar: DurationGrammar, text: str) -> None:
    with pytest.raises(DurationError, match="must not be negative"):
        parse_duration(text, grammar)


def test_the_message_lists_the_units_of_the_grammar() -> None:
    with pytest.raises(DurationError, match=r"\(h, m, s\)"):
        parse_duration("1d", CLOCK)


def test_a_grammar_with_an_unknown_unit_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown duration units"):
        DurationGrammar(units=("s", "fortnight"))


def test_the_default_grammar_is_go() -> None:
    assert parse_duration("1h") == F(3600)
    assert DurationError.__mro__[1] is ValueError
