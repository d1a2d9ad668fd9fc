"""A face's world when it talks to the cluster: :class:`Ctx`, the API (connected on first use), the namespace,
the clock and the output streams.

``kq``'s commands get one from their flags (:func:`ctx_from_args`); the console builds one per request, acting
as its user. Tests pass their own (a fake API, a fixed clock, string buffers) as ``args.ctx``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from webhook.readmodel.kubeapi import KubeApi


@dataclass
class Ctx:
    """A command's world: the API (connected on first use), the clock and the output streams."""

    api_factory: Callable[[], KubeApi]
    namespace_flag: str | None = None
    now: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    width: int = 80
    _api: KubeApi | None = None

    @property
    def api(self) -> KubeApi:
        if self._api is None:
            self._api = self.api_factory()
        return self._api

    @property
    def namespace(self) -> str:
        """``-n`` when given, else the kubeconfig context's namespace, else ``default``."""
        return self.namespace_flag or self.api.namespace or "default"

    @property
    def namespace_explicit(self) -> bool:
        return bool(self.namespace_flag)

    def print(self, text: str = "") -> None:
        self.out.write(text if text.endswith("\n") else text + "\n")
        self.out.flush()

    def note(self, text: str) -> None:
        """A line on stderr (progress, hints) that scripts reading stdout do not see."""
        self.err.write(text + "\n")
        self.err.flush()


def ctx_from_args(args: argparse.Namespace) -> Ctx:
    """The command's :class:`Ctx`: the one a test put in ``args.ctx`` (with ``-n`` applied), else one that
    connects with ``--kubeconfig`` and ``--context`` on first use."""
    given = getattr(args, "ctx", None)
    if isinstance(given, Ctx):
        if getattr(args, "namespace", None):
            given.namespace_flag = args.namespace
        return given

    def factory() -> KubeApi:
        from webhook.readmodel.kubeapi import connect  # noqa: PLC0415

        return connect(getattr(args, "kubeconfig", None), getattr(args, "context", None))

    return Ctx(api_factory=factory, namespace_flag=getattr(args, "namespace", None) or None)
