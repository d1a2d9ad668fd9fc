"""The controller's in-memory apiserver (:mod:`tests.service.kubeclient_fake`) pins its own behaviour."""

from __future__ import annotations

import asyncio

import pytest

from tests.service.kubeclient_fake import JOBS, FakeApi
from webhook.api.objects import mappings, name_of, resource_version_of
from webhook.kube.client import KubeApiError, ResourceRef


async def test_the_fake_lists_watches_patches_and_refuses_stale_writes() -> None:
    api = FakeApi()
    ref = ResourceRef("batch", "v1", "jobs")
    created = await api.create(ref, {"metadata": {"name": "a"}, "spec": {"suspend": True}}, "ns")
    page = await api.list_page(ref)
    assert [name_of(item) for item in mappings(page["items"])] == ["a"]
    seen: list[str] = []

    async def consume() -> None:
        async with api.watch(ref, resource_version=resource_version_of(page), timeout_seconds=5) as events:
            async for event in events:
                seen.append(str(event["type"]))
                if len(seen) == 2:
                    return

    task = asyncio.ensure_future(consume())
    stale = [{"op": "test", "path": "/metadata/resourceVersion", "value": "1"}]
    with pytest.raises(KubeApiError) as refused:
        await api.json_patch(ref, "a", stale, "ns")
    assert refused.value.status == 422
    fresh: list[dict[str, object]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version_of(created)},
        {"op": "replace", "path": "/spec/suspend", "value": False}]
    await api.json_patch(ref, "a", fresh, "ns")
    await api.merge_patch(ref, "a", {"metadata": {"labels": {"x": "1"}}}, "ns")
    await asyncio.wait_for(task, 5)
    assert seen == ["MODIFIED", "MODIFIED"]
    assert api.obj(JOBS, "a", "ns")["metadata"]["labels"] == {"x": "1"}
    with pytest.raises(KubeApiError) as duplicate:
        await api.create(ref, {"metadata": {"name": "a"}}, "ns")
    assert duplicate.value.conflict
    assert (await api.request("GET", "/apis/batch/v1"))["resources"] == [{"name": "jobs"}]
    with pytest.raises(KubeApiError):
        await api.request("GET", "/apis/kubeflow.org/v1")
