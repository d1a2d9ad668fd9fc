"""Job kinds come and go with their CRDs: the controller watches a kind once the API serves it, and stops
watching it once the API says for sure it is gone (a transient discovery failure is not proof)."""

from __future__ import annotations

import asyncio

from tests.service.test_controller_fake_api import Kind
from tests.service.test_controller_loop import seed_api, settings
from webhook.controller.controller import Controller

PYTORCHJOBS: Kind = ("kubeflow.org", "v1", "pytorchjobs")
KEY = "PyTorchJob.kubeflow.org"


async def test_a_kind_is_watched_while_its_crd_is_installed() -> None:
    api = seed_api()
    controller = Controller(api, settings())
    try:
        await controller.cache.discover()
        assert KEY not in controller.cache.job_caches
        api.kinds.add(PYTORCHJOBS)
        await controller.cache.discover()
        assert KEY in controller.cache.job_caches and KEY in controller.stats.kinds
        task = controller.cache.job_cache_tasks[KEY]

        api.fail(503, lambda method, path: path == "/apis/kubeflow.org/v1", times=1)
        await controller.cache.discover()
        assert KEY in controller.cache.job_caches, "a 503 from discovery is not proof the kind is gone"

        api.kinds.discard(PYTORCHJOBS)
        await controller.cache.discover()
        assert KEY not in controller.cache.job_caches and KEY not in controller.stats.kinds
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
        assert "Job.batch" in controller.cache.job_caches, "other kinds keep their caches"

        api.kinds.add(PYTORCHJOBS)
        await controller.cache.discover()
        assert KEY in controller.cache.job_caches, "re-installed: watched again"
    finally:
        for task in controller._tasks:
            task.cancel()
        await asyncio.gather(*controller._tasks, return_exceptions=True)
