"""``kq``'s client reads a long list page by page over HTTP (``webhook/readmodel/paging.py``) against the fake
API server, which pages as the API server does: every object comes once, in order, each page asked with the
token of the one before."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs

from tests.service.apiserver_http import HttpApiserver, serving
from webhook.api.objects import name_of
from webhook.readmodel.kubeapi import JOBS, ApiError, HttpApi
from webhook.readmodel.kubeconfig import Connection, Credentials

TOKEN = "pages-token"
JOB_KIND = ("batch", "v1", "jobs")


def job(number: int, namespace: str) -> dict[str, object]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"j-{number:05d}", "namespace": namespace, "labels": {"n": str(number % 2)}},
            "spec": {"suspend": True}}


async def test_a_list_of_three_pages_comes_whole_in_order() -> None:
    fake = HttpApiserver({TOKEN: "alice"})
    for number in range(1201):
        fake.put(JOB_KIND, job(number, "ns-a" if number < 700 else "ns-b"))
    async with serving(fake) as url:
        api = HttpApi(Connection(server=url, namespace="ns-a", credentials=Credentials(token=TOKEN)))
        everything = await asyncio.to_thread(api.list, JOBS)
        selected = await asyncio.to_thread(api.list, JOBS, "ns-b", label_selector="n=1")
        api.close()
    assert [name_of(obj) for obj in everything] == [f"j-{n:05d}" for n in range(1201)]
    assert [name_of(obj) for obj in selected] == [f"j-{n:05d}" for n in range(701, 1201, 2)]
    asked = [parse_qs(seen.query) for seen in fake.seen if seen.path == "/apis/batch/v1/jobs"]
    assert [query.get("continue") for query in asked] == [None, ["500"], ["1000"]]
    assert all(query["limit"] == ["500"] for query in asked)


async def test_a_refused_list_is_an_error_not_an_empty_list() -> None:
    fake = HttpApiserver({TOKEN: "alice"})
    fake.put(JOB_KIND, job(1, "ns-a"))
    async with serving(fake) as url:
        api = HttpApi(Connection(server=url, namespace="ns-a", credentials=Credentials(token="wrong")))
        try:
            await asyncio.to_thread(api.list, JOBS)
        except ApiError as error:
            assert error.status == 401
        else:
            raise AssertionError("a list the server refused came back")
        finally:
            api.close()
