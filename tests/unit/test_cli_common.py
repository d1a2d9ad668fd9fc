"""What every ``kq`` command shares (``webhook/cli/common.py``): the cyclic collector is off while a command
runs (its objects are acyclic JSON, freed by reference counting), collects whenever the command waits, and is
back on after, however the command ends."""

from __future__ import annotations

import argparse
import gc
import io

import pytest

from webhook.cli.common import command
from webhook.readmodel.context import Ctx
from webhook.readmodel.fetch import CliError
from webhook.readmodel.kubeapi import KubeApi


def run(body: object) -> tuple[int, list[bool], str]:
    seen: list[bool] = []

    def function(ctx: Ctx, args: argparse.Namespace) -> int:
        seen.append(gc.isenabled())
        if isinstance(body, BaseException):
            raise body
        return 0

    err = io.StringIO()
    ctx = Ctx(api_factory=KubeApi, out=io.StringIO(), err=err)
    status = command(function)(argparse.Namespace(ctx=ctx))
    return status, seen, err.getvalue()


@pytest.mark.parametrize("body", [None, CliError("no such job"), KeyboardInterrupt()])
def test_a_command_runs_without_the_cyclic_collector_and_gives_it_back(body: object) -> None:
    assert gc.isenabled()
    status, seen, _ = run(body)
    assert seen == [False]
    assert gc.isenabled()
    assert status == {type(None): 0, CliError: 1, KeyboardInterrupt: 130}[type(body)]


def test_a_collector_someone_turned_off_stays_off() -> None:
    gc.disable()
    try:
        run(None)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_an_unexpected_failure_still_gives_the_collector_back() -> None:
    with pytest.raises(ZeroDivisionError):
        run(ZeroDivisionError())
    assert gc.isenabled()


def test_a_command_that_waits_collects_while_it_waits() -> None:
    slept: list[float] = []
    ctx = Ctx(api_factory=KubeApi, out=io.StringIO(), err=io.StringIO(), sleep=slept.append)
    collections: list[int] = []

    def function(ctx: Ctx, args: argparse.Namespace) -> int:
        for _ in range(3):
            before = gc.get_stats()[2]["collections"]
            ctx.sleep(2.0)
            collections.append(gc.get_stats()[2]["collections"] - before)
        return 0

    assert command(function)(argparse.Namespace(ctx=ctx)) == 0
    assert slept == [2.0, 2.0, 2.0]
    assert collections == [1, 1, 1]
    assert ctx.sleep == slept.append  # the context is given back as it came
