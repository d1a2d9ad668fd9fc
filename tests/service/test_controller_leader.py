"""Leader election over a Lease (against the in-memory apiserver, with a fake clock), and two controller
replicas of which only the leader writes."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from tests.service.controller_support import admitted, pi, seed_api, settings
from tests.service.kubeclient_fake import JOBS, FakeApi, Kind
from webhook.controller.controller import Controller
from webhook.controller.leader import LeaderElector, LeaseTerms

LEASES: Kind = ("coordination.k8s.io", "v1", "leases")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(api: FakeApi, clock: Clock, identity: str, **kwargs: Any) -> LeaderElector:
    terms = LeaseTerms("kube-queue", "kube-queue-controller", identity, lease_duration=15, renew_deadline=10,
                       retry_period=2)
    return LeaderElector(api, terms, clock=clock, wall=clock, **kwargs)


async def test_the_first_candidate_creates_the_lease_and_the_second_waits() -> None:
    api, clock = FakeApi(), Clock()
    one, two = elector(api, clock, "one"), elector(api, clock, "two")
    assert await one.try_acquire_or_renew()
    assert not await two.try_acquire_or_renew()
    lease = api.obj(LEASES, "kube-queue-controller", "kube-queue")
    assert lease["spec"]["holderIdentity"] == "one"
    assert lease["spec"]["leaseDurationSeconds"] == 15
    clock.now += 14
    assert not await two.try_acquire_or_renew(), "not expired yet on the candidate's own clock"
    assert await one.try_acquire_or_renew(), "the holder renews"
    clock.now += 14
    assert not await two.try_acquire_or_renew(), "the renewal restarted the candidate's count"
    clock.now += 16
    assert await two.try_acquire_or_renew(), "an expired lease is taken over"
    lease = api.obj(LEASES, "kube-queue-controller", "kube-queue")
    assert lease["spec"]["holderIdentity"] == "two"
    assert lease["spec"]["leaseTransitions"] == 1
    assert not await one.try_acquire_or_renew()


async def test_a_restart_with_the_same_identity_takes_its_lease_back_at_once() -> None:
    api, clock = FakeApi(), Clock()
    assert await elector(api, clock, "pod-1").try_acquire_or_renew()
    assert await elector(api, clock, "pod-1").try_acquire_or_renew()


async def test_of_two_racing_candidates_only_one_wins() -> None:
    api, clock = FakeApi(), Clock()
    await elector(api, clock, "old").try_acquire_or_renew()
    one, two = elector(api, clock, "one"), elector(api, clock, "two")
    await one.try_acquire_or_renew()
    await two.try_acquire_or_renew()
    clock.now += 16
    results = await asyncio.gather(one.try_acquire_or_renew(), two.try_acquire_or_renew())
    assert sorted(results) == [False, True]


async def test_the_leader_stops_acting_when_it_cannot_renew_in_time() -> None:
    api, clock = FakeApi(), Clock()
    changes: list[bool] = []
    sleeps: list[float] = []
    leader = elector(api, clock, "one", on_change=changes.append)

    async def sleep(delay: float) -> None:
        sleeps.append(delay)
        clock.now += delay
        if len(sleeps) == 2:
            api.fail(0, lambda method, path: "leases" in path, times=-1)
        if len(sleeps) >= 12:
            raise asyncio.CancelledError

    leader.sleep = sleep
    with contextlib.suppress(asyncio.CancelledError):
        await leader.run()
    assert changes == [True, False]
    assert not leader.is_leader()


async def test_a_clean_release_lets_the_follower_take_over_at_once() -> None:
    api, clock = FakeApi(), Clock()
    one, two = elector(api, clock, "one"), elector(api, clock, "two")
    assert await one.try_acquire_or_renew()
    one._leading = True
    assert not await two.try_acquire_or_renew()
    await one.release()
    assert api.obj(LEASES, "kube-queue-controller", "kube-queue")["spec"]["holderIdentity"] == ""
    assert await two.try_acquire_or_renew()


async def test_only_the_leader_admits_and_the_follower_takes_over_when_it_dies() -> None:
    api = seed_api()
    fast = {"leader_elect": True, "lease_duration": 0.6, "renew_deadline": 0.4, "retry_period": 0.05}
    one = Controller(api, settings(identity="one", **fast))
    two = Controller(api, settings(identity="two", **fast))
    stop = asyncio.Event()
    tasks = {"one": asyncio.ensure_future(one.run(stop)), "two": asyncio.ensure_future(two.run(stop))}
    try:
        for _ in range(2000):
            if one.is_leader() or two.is_leader():
                break
            await asyncio.sleep(0.005)
        leader, follower = (one, two) if one.is_leader() else (two, one)
        api.put(JOBS, pi("first", pods=1))
        for _ in range(2000):
            if admitted(api, "first"):
                break
            await asyncio.sleep(0.005)
        assert leader.stats.admitted == 1 and follower.stats.admitted == 0
        # the follower builds the model of each job that changed, the leader's admission included, so that its
        # first pass as leader finds them built; it decides nothing with them
        jobs_cache = next(cache.name for adapter, _, cache in follower.cache.job_caches.values()
                          if adapter.kind == "Job")
        for _ in range(2000):
            modelled = follower.cache.jobs.get(jobs_cache, "user-a", "first")
            if modelled is not None and modelled.record is not None:
                break
            await asyncio.sleep(0.005)
        assert modelled is not None and modelled.record is not None, "the follower's model of the job is cold"
        assert follower.stats.passes == 0
        for _ in range(2000):  # the follower caches the same objects and keeps them frozen between its wake-ups
            if follower._heap._last_full is not None:
                break
            await asyncio.sleep(0.005)
        assert leader._heap._last_full is not None and follower._heap._last_full is not None
        tasks[leader.settings.identity].cancel()
        await asyncio.gather(tasks[leader.settings.identity], return_exceptions=True)
        api.put(JOBS, pi("second", pods=1))
        for _ in range(4000):
            if admitted(api, "second"):
                break
            await asyncio.sleep(0.005)
        assert follower.is_leader()
        assert follower.stats.admitted == 1
    finally:
        stop.set()
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
