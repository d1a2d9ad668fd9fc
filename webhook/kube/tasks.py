"""Background tasks that live and die together: one failure cancels the rest and surfaces.

The shells run long-lived coroutines side by side (watch caches, the decision loop, the Event sender, leader
election, certificate reloads). :class:`TaskGroup` replaces the hand-written "create tasks, later cancel them
all and gather" of each: a task that fails (raises anything but a cancellation) is logged at once, cancels
every other task of the group, and its error is raised by :meth:`TaskGroup.wait` (what the owner awaits while
it runs) and by leaving ``async with`` (or :meth:`TaskGroup.close`). A task that returns or is cancelled on
its own (a watch of a kind no longer served) is simply gone. Unlike :class:`asyncio.TaskGroup`, tasks can be
started before or after the owner starts waiting, and cancelled one at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterator
from types import TracebackType

__all__ = ["TaskGroup"]

log = logging.getLogger("webhook.kube.tasks")


class TaskGroup:
    """Tasks started with :meth:`start`; see the module."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: list[asyncio.Task[None]] = []
        self._failure: BaseException | None = None
        self._failed = asyncio.Event()

    def __iter__(self) -> Iterator[asyncio.Task[None]]:
        """The tasks still running."""
        return iter(list(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def failure(self) -> BaseException | None:
        """The error of the first task that failed, if one did."""
        return self._failure

    def start(self, coroutine: Awaitable[None], name: str) -> asyncio.Task[None]:
        """Run ``coroutine`` as a task of the group, named ``name``."""
        task = asyncio.ensure_future(coroutine)
        task.set_name(name)
        self._tasks.append(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            return
        log.error("component=%s event=task_failed task=%s error=%r", self.name, task.get_name(), error,
                  exc_info=error)
        if self._failure is None:
            self._failure = error
            self._failed.set()
            for other in self._tasks:
                other.cancel()

    async def wait(self, stop: asyncio.Event | None = None) -> None:
        """Until ``stop`` is set (without ``stop``: until a task fails); raises the first failure of a task."""
        waiters = [asyncio.ensure_future(self._failed.wait())]
        if stop is not None:
            waiters.append(asyncio.ensure_future(stop.wait()))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
        self._raise_failure()

    async def close(self) -> None:
        """Cancel every task and wait until they are all done; raises the first failure of a task, if one
        failed and it was not raised yet."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._raise_failure()

    def _raise_failure(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    async def __aenter__(self) -> TaskGroup:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if error is None:
            await self.close()
            return
        # The body's own error wins; the tasks are stopped all the same.
        try:
            await self.close()
        except Exception as failure:
            log.error("component=%s event=task_failed_while_closing error=%r", self.name, failure)
