"""A new leader (or a restarted controller) does not tell every waiting job its unchanged place again: it reads
back the Queued events already sent, with the dedupe key each carries."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tests.service.test_controller_fake_api import JOBS, FakeApi
from tests.service.test_controller_loop import EVENTS, events, pi, seed_api, settings
from webhook.api.names import QUEUED_KEY_ANNOTATION
from webhook.controller.controller import Controller
from webhook.controller.events import queued_memory


async def until(check: Callable[[], bool], what: str, tries: int = 4000) -> None:
    for _ in range(tries):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


async def run_until_quiet(api: FakeApi, **overrides: Any) -> Controller:
    """Run a controller until it has made a few passes after its caches synced, then stop it (a crash: the
    task is cancelled)."""
    controller = Controller(api, settings(event_interval=30.0, **overrides))
    stop = asyncio.Event()
    task = asyncio.ensure_future(controller.run(stop))
    try:
        await until(lambda: controller.stats.passes >= 3, "three passes")
        await controller.events.flush(2.0)
        await asyncio.sleep(0.05)
        await controller.events.flush(2.0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return controller


async def test_a_restarted_controller_does_not_repeat_queued_events() -> None:
    api = seed_api()
    api.put(EVENTS, {"metadata": {"name": "noise", "namespace": "user-a"}, "reason": "Scheduled"})
    api.put(JOBS, pi("first"))
    api.put(JOBS, pi("second"))
    await run_until_quiet(api)
    assert events(api, "Queued") == ["second"]
    (queued,) = [e for e in api.objects(EVENTS) if e["reason"] == "Queued"]
    assert queued["metadata"]["annotations"][QUEUED_KEY_ANNOTATION]
    await run_until_quiet(api)
    assert events(api, "Queued") == ["second"], "the same place is not told twice"


async def test_events_without_a_key_are_sent_again() -> None:
    api = seed_api()
    api.put(JOBS, pi("first"))
    api.put(JOBS, pi("second"))
    await run_until_quiet(api)
    for event in api.objects(EVENTS):
        event["metadata"].pop("annotations", None)  # as an older version wrote them
        api.put(EVENTS, event)
    await run_until_quiet(api)
    assert events(api, "Queued") == ["second", "second"]


async def test_if_the_events_cannot_be_read_they_are_sent_again() -> None:
    api = seed_api()
    api.put(JOBS, pi("first"))
    api.put(JOBS, pi("second"))
    await run_until_quiet(api)
    api.fail(403, lambda method, path: method == "GET" and path.endswith("/events"), times=-1)
    await run_until_quiet(api)
    assert events(api, "Queued") == ["second", "second"]


def _event(uid: str, key: str | None, at: str, reason: str = "Queued", component: str = "kube-queue-controller"
           ) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": f"{uid}.{at}"}
    if key is not None:
        metadata["annotations"] = {QUEUED_KEY_ANNOTATION: key}
    return {"metadata": metadata, "reason": reason, "involvedObject": {"uid": uid}, "eventTime": at,
            "source": {"component": component}}


def test_the_memory_keeps_each_jobs_latest_keyed_queued_event() -> None:
    now = 1_790_000_100.0  # 2026-09-21T14:15:00Z
    listed = [
        _event("a", "quota:cpu", "2026-09-21T14:13:20.000000Z"),
        _event("a", "behind:x", "2026-09-21T14:14:40.000000Z"),
        _event("b", None, "2026-09-21T14:14:00.000000Z"),
        _event("c", "quota:cpu", "2026-09-21T14:14:00.000000Z", reason="Admitted"),
        _event("d", "quota:cpu", "2026-09-21T14:14:00.000000Z", component="someone-else"),
        _event("e", "quota:cpu", "yesterday"),
    ]
    assert queued_memory(listed, now) == {"a": ("behind:x", 20.0)}
