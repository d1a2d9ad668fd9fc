"""Pods that a job's own pod creates: a SparkApplication's driver creates its executors (docs/job-kinds.md).

The driver runs under a ServiceAccount of the user's namespace, so its pods cannot be trusted as an operator's:
the webhook holds them at creation like a user's bare Pods. They are not queued on their own, though. The job
was admitted with room for them already, so the controller releases the held pods that name the job's driver
as their owner, up to the count and the size the job was admitted with. A pod past the count, or bigger than
one of them, stays held: it would use room the job was not admitted for. Whoever makes such pods (the driver,
or a user posing as it) gets no more than the job's own admission.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from webhook.core.resources import Resources
from webhook.core.workload import Workload


@dataclass(frozen=True, slots=True)
class SpawnedRelease:
    """What to do with a job's held pods: release some, keep the others held with why."""

    release: tuple[str, ...] = ()
    kept: tuple[tuple[str, str], ...] = ()
    """``(pod name, why it stays held)``."""


def release_spawned(
    job: str,
    pod_set: str,
    *,
    admitted: bool,
    allowed: int,
    present: int,
    per_pod: Resources,
    held: Sequence[Workload],
) -> SpawnedRelease:
    """Which of ``job``'s ``held`` pods (each a Pod as the queue sizes it) to release, oldest first.

    ``allowed`` is how many pods of ``pod_set`` the job was admitted with, each of ``per_pod``; ``present`` how
    many of them exist unheld already (they keep their place until they are gone). A pod is released only
    while the job is admitted, fits ``per_pod`` in every resource, and leaves the unheld ones within ``allowed``.
    """
    if not admitted:
        why = f"held until {job} is admitted: its admission counts this {pod_set} pod"
        return SpawnedRelease(kept=tuple((pod.key.name, why) for pod in held))
    release: list[str] = []
    kept: list[tuple[str, str]] = []
    room = max(0, allowed - present)
    for pod in sorted(held, key=lambda pod: (pod.created, pod.key.name)):
        if not pod.request.fits_within(per_pod, absent_is_unlimited=False):
            kept.append((pod.key.name, f"it requests {pod.request.describe()}, more than the {per_pod.describe()} "
                                   f"each {pod_set} pod of {job} was admitted with"))
        elif room > 0:
            release.append(pod.key.name)
            room -= 1
        else:
            kept.append((pod.key.name, f"{job} was admitted with {allowed} {pod_set} pod(s), and {allowed} exist "
                                   "already; it is released when one of them is gone"))
    return SpawnedRelease(tuple(release), tuple(kept))
