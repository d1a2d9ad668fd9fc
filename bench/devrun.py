"""One fresh dev cluster around one benchmark's work (the end-to-end and burst benches share it).

The cluster's progress lines go to stderr (they are not part of the report). A failure is a report's problem,
not a crash: it is printed with where the logs were kept (copied out before the state directory goes), and
handed back, so the bench says what went wrong instead of inventing numbers. The cluster is always taken down.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from webhook.cli import devsystem
from webhook.devcluster import cluster
from webhook.devcluster.config import ClusterConfig

T = TypeVar("T")


def state_dir(bench: str) -> Path:
    """A fresh state directory for the ``bench`` bench's cluster (:func:`run` removes it)."""
    return Path(tempfile.mkdtemp(prefix=f"kq-bench-{bench}-"))


def run(bench: str, config: ClusterConfig, work: Callable[[], T],
        bring_up: Callable[[ClusterConfig], object] = devsystem.up) -> tuple[T | None, str]:
    """Bring the cluster of ``config`` up (``kq dev up`` unless ``bring_up`` says otherwise), do ``work``, take
    the cluster down: ``(what work returned, "")``, or ``(None, the problem)`` when bringing up or the work
    failed."""
    echo = lambda line: print(line, file=sys.stderr)  # noqa: E731
    try:
        print(f"{bench} bench: dev cluster in {config.state_dir} on ports {config.ports.base}+ ...", file=sys.stderr)
        with contextlib.redirect_stdout(sys.stderr):
            bring_up(config)
        return work(), ""
    except Exception as error:  # a report, not a test: say what went wrong instead of inventing numbers
        problem = f"{type(error).__name__}: {error}"
        if config.logs.is_dir():  # none yet when the cluster failed before its first process started
            kept = Path(tempfile.gettempdir()) / f"kq-bench-{bench}-logs-{int(time.time())}"
            shutil.copytree(config.logs, kept, dirs_exist_ok=True)
            print(f"{bench} bench failed: {problem}; logs kept in {kept}", file=sys.stderr)
        else:
            print(f"{bench} bench failed: {problem}", file=sys.stderr)
        return None, problem
    finally:
        cluster.down(config, purge=True, echo=echo)
        shutil.rmtree(config.state_dir, ignore_errors=True)
