"""Which pods of a job to read the logs of, and how: chief first (Kubeflow ``master``/``chief``/``launcher``,
Ray ``head``, Spark ``driver``, a JobSet's ``leader``), then by replica or completion index, then by name; the
log request; and why a pod's logs cannot be read. ``kq logs`` and the console's followed log use them alike.

The API server reads logs from the node's kubelet. kwok fake nodes have none: kwok's own server answers in its
place only where kwok is configured for it (a ``ClusterLogs`` or ``Logs`` object, the node's kubelet endpoint
pointing at kwok). The dev cluster is (every pod shows one generated log, see ``webhook/devcluster/podlog.py``);
on a kwok cluster that is not, reading fails and the error says so in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from webhook.api.names import FAKE_NODE_ANNOTATION, INDEX_LABELS, ROLE_LABELS
from webhook.api.objects import Obj, annotations_of, labels_of, name_of, pod_spec

if TYPE_CHECKING:
    from webhook.readmodel.kubeapi import ApiError, KubeApi

PodT = TypeVar("PodT", bound=Obj)
"""A pod as the caller holds it (``choose_pods`` gives back the same objects)."""

ROLE_RANK = ("master", "chief", "launcher", "head", "driver", "leader", "ps", "worker", "evaluator", "executor")


def pod_order(pod: Obj) -> tuple[int, int, str]:
    """Chief first, then by index, then by name."""
    labels = labels_of(pod)
    role = next((str(labels[key]).lower() for key in ROLE_LABELS if key in labels), "")
    rank = ROLE_RANK.index(role) if role in ROLE_RANK else len(ROLE_RANK)
    index = next((labels[key] for key in INDEX_LABELS if key in labels), None)
    number = int(index) if isinstance(index, str) and index.isdigit() else 1 << 30
    return rank, number, name_of(pod)


def pod_name(pod: Obj) -> str:
    return name_of(pod)


def choose_pods(pods: Sequence[PodT], wanted: str | None, every: bool) -> list[PodT]:
    """The pods to read: ``--all`` every one, ``-i POD`` the one named so (or the only one whose name ends with
    or contains it), else the chief/first one. ``ValueError`` naming the choices when ``-i`` matches none."""
    ordered = sorted(pods, key=pod_order)
    if every:
        return ordered
    if wanted is None:
        return ordered[:1]
    for test in (
        lambda name: name == wanted,
        lambda name: name.endswith("-" + wanted),
        lambda name: wanted in name,
    ):
        found = [pod for pod in ordered if test(pod_name(pod))]
        if len(found) == 1:
            return found
        if len(found) > 1:
            break
    names = ", ".join(pod_name(pod) for pod in ordered) or "none"
    raise ValueError(f"-i {wanted!r} names none of the job's pods ({names})")


def log_query(
    container: str | None, follow: bool, tail: int | None, since: int | None, timestamps: bool = False
) -> list[tuple[str, str]]:
    query = []
    if container:
        query.append(("container", container))
    if follow:
        query.append(("follow", "true"))
    if tail is not None and tail >= 0:
        query.append(("tailLines", str(tail)))
    if since is not None:
        query.append(("sinceSeconds", str(since)))
    if timestamps:
        query.append(("timestamps", "true"))
    return query


def log_path(namespace: str, pod: str) -> str:
    from webhook.readmodel.kubeapi import PODS  # noqa: PLC0415

    return PODS.path(namespace, pod, "log")


def explain_log_error(api: KubeApi, pod: Obj, error: ApiError) -> str:
    """One line saying why a pod's logs cannot be read (a kwok node has no kubelet, a container has not
    started...)."""
    from webhook.readmodel.kubeapi import NODES, ApiError  # noqa: PLC0415

    name = pod_name(pod)
    node = str(pod_spec(pod).get("nodeName") or "")
    said = error.one_line()
    if error.status == 400 or error.not_found:
        return f"cannot read the logs of pod {name}: {said}"
    if node and (error.status >= 500 or "10250" in said or "dial tcp" in said):
        try:
            annotations = annotations_of(api.get(NODES, node))
        except ApiError:
            annotations = {}
        if FAKE_NODE_ANNOTATION in annotations:
            return (
                f"cannot read the logs of pod {name}: it runs on node {node}, a kwok fake node with no kubelet and "
                f"no kwok log server configured for it (kwok ClusterLogs; `kq dev up` sets it up), so there are no "
                f"logs to read (the API server said: {said})"
            )
        return f"cannot read the logs of pod {name}: the API server could not reach the kubelet of node {node}: {said}"
    return f"cannot read the logs of pod {name}: {said}"
