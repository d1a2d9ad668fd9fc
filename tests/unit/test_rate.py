"""The oversell rate is read, checked and defaulted in one place (webhook/core/rate.py), and every face refuses a
bad one with the same words."""

from __future__ import annotations

import argparse
from fractions import Fraction

import pytest

from webhook.controller.settings import ControllerSettings
from webhook.controller.settings import rate_flag as controller_flag
from webhook.core.rate import DEFAULT_OVERSELL_RATE, Rate, RateError, format_rate, parse_rate, validate_rate
from webhook.readmodel.commandline import rate_flag as cli_flag
from webhook.sim.model import Scenario


@pytest.mark.parametrize(("text", "rate"), [("2", Fraction(2)), (" 1.5 ", Fraction(3, 2)), ("3/2", Fraction(3, 2)),
                                             (1, Fraction(1)), (1.25, Fraction(5, 4))])
def test_a_rate_reads_as_an_operator_writes_it(text: object, rate: Fraction) -> None:
    assert parse_rate(text) == rate
    assert parse_rate(format_rate(rate)) == rate


@pytest.mark.parametrize(("text", "words"), [("0", "must be positive"), ("-1", "must be positive"),
                                              ("two", "is not a number"), ("1/0", "is not a number"),
                                              (True, "is not a number"), (None, "is not a number")])
def test_a_bad_rate_is_refused_alike_by_every_face(text: object, words: str) -> None:
    with pytest.raises(RateError, match=words) as refused:
        parse_rate(text)
    for flag in (cli_flag, controller_flag):
        with pytest.raises(argparse.ArgumentTypeError) as by_flag:
            flag(str(text))
        assert words in str(by_flag.value)
    assert "oversellrate" in str(refused.value)


def test_the_default_is_written_once() -> None:
    assert ControllerSettings().oversell_rate == DEFAULT_OVERSELL_RATE == Fraction(2)
    assert Scenario.__dataclass_fields__["oversell_rate"].default == DEFAULT_OVERSELL_RATE


def test_a_checked_rate_passes_every_level_of_a_pass_unchecked_again() -> None:
    """``parse_rate`` and ``validate_rate`` make a :class:`Rate`; the levels below take it as it is."""
    parsed = parse_rate("3/2")
    assert isinstance(parsed, Rate)
    assert validate_rate(parsed) is parsed
    assert isinstance(DEFAULT_OVERSELL_RATE, Rate)
    checked = validate_rate(Fraction(5, 4))
    assert isinstance(checked, Rate) and checked == Fraction(5, 4)
    assert validate_rate(checked) is checked
    for bad in (Fraction(0), -1, True, 1.5):
        with pytest.raises(ValueError, match="oversell rate"):
            validate_rate(bad)  # type: ignore[arg-type]
