"""The watch-fed cache: list, watch, bookmarks, re-list on 410 Gone, back off on errors (scripted source)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.builders import SEED_TREE_SPEC
from webhook.admission.sources import _rebuild
from webhook.admission.state import StateStore
from webhook.api.objects import name_of, resource_version_of
from webhook.kube.cache import RECONNECT_CAP_SECONDS, RELIST, Backoff, CacheEvent, WatchCache
from webhook.kube.client import JSON, KubeApiError, ResourceRef


def obj(name: str, rv: str, namespace: str = "ns", **extra: Any) -> JSON:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": rv}, **extra}


class Script:
    """A ListWatch that plays lists and watches from queues, then blocks (until the test cancels)."""

    def __init__(self) -> None:
        self.lists: list[list[JSON] | Exception] = []
        self.watches: list[list[JSON | Exception] | Exception] = []
        self.list_calls: list[str | None] = []
        self.watch_calls: list[str] = []
        self.idle = asyncio.Event()

    async def list_page(self, limit: int, continue_token: str | None) -> JSON:
        self.list_calls.append(continue_token)
        if not self.lists:
            self.idle.set()
            await asyncio.Event().wait()
        page = self.lists.pop(0)
        if isinstance(page, Exception):
            raise page
        return page[0] if page and "items" in page[0] else {"items": page, "metadata": {"resourceVersion": "10"}}

    @contextlib.asynccontextmanager
    async def watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[AsyncIterator[JSON]]:
        self.watch_calls.append(resource_version)
        if not self.watches:
            self.idle.set()
            await asyncio.Event().wait()
        script = self.watches.pop(0)
        if isinstance(script, Exception):
            raise script

        async def events() -> AsyncIterator[JSON]:
            assert not isinstance(script, Exception)
            for event in script:
                if isinstance(event, Exception):
                    raise event
                yield event

        yield events()


class FakeSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


async def run_until_idle(cache: WatchCache, script: Script) -> None:
    task = asyncio.create_task(cache.run())
    try:
        await asyncio.wait_for(script.idle.wait(), timeout=10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def make(script: Script, sleep: FakeSleep | None = None) -> tuple[WatchCache, list[CacheEvent]]:
    cache = WatchCache("test", script, sleep=sleep or FakeSleep(), backoff=Backoff(initial=1, cap=8))
    events: list[CacheEvent] = []
    cache.add_listener(lambda _cache, event: events.append(event))
    return cache, events


async def test_lists_then_applies_watch_events_and_bookmarks() -> None:
    script = Script()
    script.lists = [[obj("a", "1"), obj("b", "2")]]
    script.watches = [
        [
            {"type": "ADDED", "object": obj("c", "11")},
            {"type": "MODIFIED", "object": obj("a", "12", spec={"x": 1})},
            {"type": "DELETED", "object": obj("b", "13")},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}},
        ]
    ]
    cache, events = make(script)
    await run_until_idle(cache, script)
    assert cache.synced.is_set()
    assert [name_of(o) for o in cache.items()] == ["a", "c"]
    cached = cache.get("a", "ns")
    assert cached is not None and cached["spec"] == {"x": 1}
    assert [e.type for e in events] == [RELIST, "ADDED", "MODIFIED", "DELETED"]
    assert events[2].old is not None and resource_version_of(events[2].old) == "1"
    # The first watch starts at the list's version; the next resumes after the bookmark.
    assert script.watch_calls == ["10", "20"]
    assert cache.lists == 1


async def test_paginates_with_continue_tokens() -> None:
    script = Script()
    script.lists = [
        [{"items": [obj("a", "1")], "metadata": {"resourceVersion": "5", "continue": "tok"}}],
        [{"items": [obj("b", "2")], "metadata": {"resourceVersion": "5"}}],
    ]
    cache, _ = make(script)
    await run_until_idle(cache, script)
    assert script.list_calls == [None, "tok"]
    assert len(cache) == 2


async def test_expired_continue_token_restarts_the_list() -> None:
    script = Script()
    script.lists = [
        [{"items": [obj("a", "1")], "metadata": {"resourceVersion": "5", "continue": "tok"}}],
        KubeApiError(410, "Expired"),
        [obj("a", "1"), obj("b", "2")],
    ]
    cache, _ = make(script)
    await run_until_idle(cache, script)
    assert script.list_calls == [None, "tok", None]
    assert len(cache) == 2


@pytest.mark.parametrize(
    "gone",
    [
        KubeApiError(410, "Gone"),
        [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}],
    ],
    ids=["http-410", "error-event-410"],
)
async def test_gone_relists_at_once_without_backoff(gone: Any) -> None:
    script = Script()
    script.lists = [[obj("a", "1")], [obj("b", "30")]]
    script.watches = [gone]
    sleep = FakeSleep()
    cache, events = make(script, sleep)
    await run_until_idle(cache, script)
    assert cache.lists == 2
    assert [name_of(o) for o in cache.items()] == ["b"]
    assert [e.type for e in events] == [RELIST, RELIST]
    assert sleep.delays == []


async def test_errors_back_off_exponentially_then_resume_from_the_last_version() -> None:
    script = Script()
    script.lists = [KubeApiError(0, "ConnectionError"), KubeApiError(500, "Internal"), [obj("a", "1")]]
    script.watches = [
        KubeApiError(0, "Timeout"),
        [{"type": "ADDED", "object": obj("b", "15")}, KubeApiError(0, "ConnectionError")],
    ]
    sleep = FakeSleep()
    cache, _ = make(script, sleep)
    await run_until_idle(cache, script)
    # Two failed lists (1, 2 s bands), the list resets the backoff, a failed watch (1 s band), then an event
    # resets it again before the stream breaks (1 s band).
    assert len(sleep.delays) == 4
    assert 0.5 <= sleep.delays[0] <= 1 and 1 <= sleep.delays[1] <= 2
    assert 0.5 <= sleep.delays[2] <= 1 and 0.5 <= sleep.delays[3] <= 1
    assert script.watch_calls == ["10", "10", "15"]
    assert cache.lists == 1
    assert cache.errors == 4


def test_backoff_is_capped() -> None:
    backoff = Backoff(initial=1, factor=2, cap=8)
    delays = [backoff.next_delay() for _ in range(10)]
    assert all(d <= 8 for d in delays)
    assert delays[-1] >= 4


async def test_reconnects_during_a_long_outage_wait_at_most_a_few_seconds() -> None:
    # Issue 17 hole 6: after a 12 s API outage the job watch came back 13 s late (backoff capped at 30 s).
    script = Script()
    script.lists = [[obj("a", "1")]]
    script.watches = [KubeApiError(0, "ConnectionError") for _ in range(21)]  # every reconnect fails
    sleep = FakeSleep()
    cache = WatchCache("jobs", script, sleep=sleep)  # the default backoff, as the service runs it
    await run_until_idle(cache, script)
    assert len(sleep.delays) == 21
    assert max(sleep.delays) <= RECONNECT_CAP_SECONDS <= 5
    assert min(sleep.delays[-10:]) >= RECONNECT_CAP_SECONDS / 2  # capped, not reset: no hammering either
    # However long the outage, the first attempt after the API is back comes within the cap.
    assert len(script.watch_calls) == 22 and set(script.watch_calls) == {"10"}


async def test_listener_failures_do_not_stop_the_cache() -> None:
    script = Script()
    script.lists = [[obj("a", "1")]]
    script.watches = [[{"type": "ADDED", "object": obj("b", "2")}]]
    cache, events = make(script)

    def broken(_cache: WatchCache, _event: CacheEvent) -> None:
        raise RuntimeError("listener bug")

    cache.add_listener(broken)
    await run_until_idle(cache, script)
    assert len(cache) == 2
    assert [e.type for e in events] == [RELIST, "ADDED"]


async def test_store_rebuilds_state_from_cache_events() -> None:
    store = StateStore()
    script = Script()
    tree: JSON = {
        "metadata": {"name": "elasticquotatree", "namespace": "kube-system", "resourceVersion": "1"},
        "spec": SEED_TREE_SPEC,
    }
    script.lists = [[tree]]
    script.watches = [[{"type": "DELETED", "object": tree}]]
    cache = WatchCache("trees", script, sleep=FakeSleep())
    seen: list[bool] = []
    cache.add_listener(_rebuild(store.set_trees))
    cache.add_listener(lambda _c, _e: seen.append(store.current.leaf_for_namespace("user-a") is not None))
    await run_until_idle(cache, script)
    assert seen == [True, False]
    assert store.current.tree is None
    assert store.current.tree_names == frozenset()


def test_resource_paths() -> None:
    assert ResourceRef("", "v1", "pods", "ns").path("p") == "/api/v1/namespaces/ns/pods/p"
    assert ResourceRef("batch", "v1", "jobs").path() == "/apis/batch/v1/jobs"
    assert ResourceRef("batch", "v1", "jobs").path("j", "ns", "status") == "/apis/batch/v1/namespaces/ns/jobs/j/status"
    assert ResourceRef("scheduling.k8s.io", "v1", "priorityclasses").path("high") == (
        "/apis/scheduling.k8s.io/v1/priorityclasses/high"
    )
