"""Lists read page by page with the next page on its way (``webhook/readmodel/paging.py``): the pages come
whole and in order, a failure comes where its page would have, and stopping early frees the connection."""

from __future__ import annotations

import threading
from collections.abc import Callable

import orjson
import pytest

from webhook.api.objects import mappings, name_of
from webhook.readmodel.kubeapi import ApiError
from webhook.readmodel.paging import continue_token, prefetched


def page(names: list[str], token: str = "") -> bytes:
    """A list page as the API server writes it: kind, apiVersion, metadata, then items."""
    metadata = {"resourceVersion": "7", **({"continue": token, "remainingItemCount": 3} if token else {})}
    return orjson.dumps({"kind": "JobList", "apiVersion": "batch/v1", "metadata": metadata,
                         "items": [{"metadata": {"name": name}} for name in names]})


def test_the_continue_token_is_read_from_the_head_of_the_answer() -> None:
    assert continue_token(page(["a"], "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ-_=")) == "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ-_="
    assert continue_token(page(["a"])) == ""


@pytest.mark.parametrize("raw", [
    b'{"items": [], "kind": "List", "metadata": {"continue": "x"}}',  # another order of fields
    b'{"kind":"List","apiVersion":"v1","metadata":{"continue":"a\\"b"},"items":[]}',  # an escaped token
    b"not json at all",
])
def test_an_answer_of_another_shape_must_be_decoded_to_know_its_token(raw: bytes) -> None:
    assert continue_token(raw) is None


def served(pages: dict[str, bytes], asked: list[str]) -> Callable[[list[tuple[str, str]]], bytes]:
    def fetch(query: list[tuple[str, str]]) -> bytes:
        token = dict(query).get("continue", "")
        asked.append(token)
        if token not in pages:
            raise ApiError(410, "Expired", "the continue token is too old")
        return pages[token]
    return fetch


def test_every_page_comes_in_order_and_the_last_ends_the_list() -> None:
    asked: list[str] = []
    pages = {"": page(["a", "b"], "t1"), "t1": page(["c", "d"], "t2"), "t2": page(["e"])}
    got = [name_of(item) for one in prefetched(served(pages, asked), [("labelSelector", "x")])
           for item in mappings(one["items"])]
    assert got == ["a", "b", "c", "d", "e"]
    assert asked == ["", "t1", "t2"]


def test_a_page_of_another_shape_is_decoded_to_follow_its_token() -> None:
    asked: list[str] = []
    other = orjson.dumps({"items": [{"metadata": {"name": "b"}}], "metadata": {"continue": "t2"}, "kind": "List"})
    pages = {"": page(["a"], "t1"), "t1": other, "t2": page(["c"])}
    got = [name_of(item) for one in prefetched(served(pages, asked), []) for item in mappings(one["items"])]
    assert got == ["a", "b", "c"]


def test_a_failure_is_raised_where_its_page_would_come() -> None:
    asked: list[str] = []
    pages = {"": page(["a"], "t1"), "t1": page(["b"], "gone")}
    seen: list[str] = []
    with pytest.raises(ApiError, match="too old"):
        for one in prefetched(served(pages, asked), []):
            seen += [name_of(item) for item in mappings(one["items"])]
    assert seen == ["a", "b"]


def test_stopping_early_stops_the_fetching_and_waits_for_it() -> None:
    busy = threading.Lock()
    fetched: list[int] = []

    def fetch(query: list[tuple[str, str]]) -> bytes:
        assert busy.acquire(blocking=False), "two requests at once on one connection"
        try:
            number = int(dict(query).get("continue") or 0)
            fetched.append(number)
            return page([f"j{number}"], str(number + 1))  # an endless list
        finally:
            busy.release()

    pages = prefetched(fetch, [])
    assert next(pages)["items"] == [{"metadata": {"name": "j0"}}]
    pages.close()  # the caller stops: the thread is stopped and waited for
    count = len(fetched)
    assert not any(thread.name == "kq-list-pages" for thread in threading.enumerate())
    assert count <= 1 + 2 + 1  # the page read, the pages ahead and one in flight
    assert fetched == list(range(count))
