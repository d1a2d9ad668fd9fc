"""Builders for the extender's tests: Node, Pod, ResourcePolicy and ElasticQuotaTree JSON, ExtenderArgs.

No tests here; the other ``test_extender_*`` modules import these.

    node("ecs-0", pool="a"), virtual_node(), pod("p1", cpu="10", labels={"app": "web"})
    policy("rp", units=[ecs(pool="a"), eci(max=4)], when="ExceedMax")
"""

from __future__ import annotations

import contextlib
import functools
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiohttp
import orjson

from bench.objects import eci, ecs, node, quota_tree
from tests import builders
from webhook.core.placement import VIRTUAL_NODE_TOLERATION

__all__ = [  # node, quota_tree and the units are the benchmarks' own builders, shared
    "ALL_NODES",
    "NAMESPACE",
    "args",
    "bound",
    "eci",
    "ecs",
    "node",
    "pod",
    "policy",
    "quota_tree",
    "seed_quota_tree",
    "serving",
    "virtual_node",
]

NAMESPACE = "team"


def virtual_node(name: str = "virtual-kubelet", **labels: str) -> dict[str, Any]:
    return node(name, virtual=True, **labels)


pod = functools.partial(
    builders.pod,
    namespace=NAMESPACE,
    labels={},
    annotations={},
    numbered_uid=True,
    created="2024-05-01T12:00:00Z",
    phase="Pending",
    tolerations=[dict(VIRTUAL_NODE_TOLERATION)],
)
"""``pod(name, cpu="1", ...)``: :func:`tests.builders.pod` in namespace ``team``, with a unique uid, tolerating the
virtual node, ``Pending`` (``Running`` when bound with ``node_name``)."""


def bound(obj: Mapping[str, Any], node_name: str) -> dict[str, Any]:
    """A copy of a pod, bound to ``node_name`` and Running."""
    out = orjson.loads(orjson.dumps(obj))
    out["spec"]["nodeName"] = node_name
    out["status"]["phase"] = "Running"
    return dict(out)


def policy(
    name: str = "rp",
    units: Sequence[Mapping[str, Any]] = (),
    *,
    namespace: str = NAMESPACE,
    selector: Mapping[str, str] | None = None,
    when: str | None = None,
    timeout: str | None = None,
    created: str | None = "2024-05-01T11:00:00Z",
    **spec: Any,
) -> dict[str, Any]:
    """A ResourcePolicy; ``spec`` takes the other fields by their API names (``ignorePreviousPod=True``)."""
    body: dict[str, Any] = {"selector": dict(selector or {}), "strategy": "prefer", "units": [dict(u) for u in units]}
    if when is not None or timeout is not None:
        body["whenTryNextUnits"] = {k: v for k, v in (("policy", when), ("timeout", timeout)) if v is not None}
    body.update(spec)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"policy-{name}"}
    if created is not None:
        metadata["creationTimestamp"] = created
    return {
        "apiVersion": "scheduling.alibabacloud.com/v1alpha1",
        "kind": "ResourcePolicy",
        "metadata": metadata,
        "spec": body,
    }


def seed_quota_tree() -> dict[str, Any]:
    """root (100 CPU) > Department-a (max 100: user-a, user-b) and Department-b (max 50: user-c), leaf
    ``team`` (max 30 CPU) under Department-b."""
    return quota_tree(
        {
            "name": "root",
            "min": {"cpu": "100", "memory": "1000Gi"},
            "max": {"cpu": "100", "memory": "1000Gi"},
            "children": [
                {
                    "name": "Department-a",
                    "min": {"cpu": "50"},
                    "max": {"cpu": "100"},
                    "namespaces": ["user-a", "user-b"],
                },
                {
                    "name": "Department-b",
                    "min": {"cpu": "40"},
                    "max": {"cpu": "50"},
                    "children": [
                        {"name": "user-c", "min": {"cpu": "20"}, "max": {"cpu": "50"}, "namespaces": ["user-c"]},
                        {"name": "Team", "min": {"cpu": "20"}, "max": {"cpu": "30"}, "namespaces": [NAMESPACE]},
                    ],
                },
            ],
        }
    )


@contextlib.asynccontextmanager
async def serving(app: Any, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[aiohttp.ClientSession]:
    """``app`` (an :class:`~webhook.extender.app.ExtenderApp`) served on a free loopback port, and a client
    session whose relative URLs go there (HTTPS with ``ssl_context``; the session does not verify it)."""
    from webhook.extender.app import MAX_BODY_BYTES  # noqa: PLC0415 - keep this module's imports light
    from webhook.extender.http import start_server  # noqa: PLC0415

    server = await start_server(app.routes(), "127.0.0.1", 0, ssl_context=ssl_context, max_body=MAX_BODY_BYTES)
    scheme = "https" if ssl_context is not None else "http"
    try:
        connector = aiohttp.TCPConnector(ssl=False) if ssl_context is not None else None
        async with aiohttp.ClientSession(f"{scheme}://127.0.0.1:{server.port}", connector=connector) as session:
            yield session
    finally:
        await server.close()


def args(pod_obj: Mapping[str, Any], names: Sequence[str]) -> bytes:
    """An ``ExtenderArgs`` body as a nodeCacheCapable scheduler sends it."""
    return orjson.dumps({"Pod": pod_obj, "Nodes": None, "NodeNames": list(names)})


ALL_NODES = ("ecs-0", "ecs-1", "ecs-2", "ecs-3", "virtual-kubelet")


class Cluster:
    """An :class:`ExtenderState` fed as the watches would feed it, with a clock the test moves.

    Nodes ``ecs-0``/``ecs-1`` carry ``pool: a``, ``ecs-2``/``ecs-3`` ``pool: b``; ``virtual-kubelet`` is the
    virtual node.
    """

    def __init__(self, *policies: Mapping[str, Any], now: float = 1_714_564_800.0, assume_ttl: float = 30.0) -> None:
        from webhook.extender.state import ExtenderState  # noqa: PLC0415 - keep this module's imports light

        self.now = now
        self.state = ExtenderState(assume_ttl=assume_ttl)
        ecs_nodes = [node("ecs-0", pool="a"), node("ecs-1", pool="a"), node("ecs-2", pool="b"), node("ecs-3", pool="b")]
        self.state.replace_nodes([*ecs_nodes, virtual_node()])
        self.state.set_policies(policies)
        self.state.replace_pods([])
        self.state.ready = True

    def filter(self, pod_obj: Mapping[str, Any], names: Sequence[str] = ALL_NODES) -> Any:
        return self.state.filter(pod_obj, names, self.now)

    def prioritize(self, pod_obj: Mapping[str, Any], names: Sequence[str] = ALL_NODES) -> Any:
        return self.state.prioritize(pod_obj, names, self.now)

    def add(self, *pods: Mapping[str, Any]) -> None:
        for obj in pods:
            self.state.upsert_pod(obj)

    def bind(self, pod_obj: Mapping[str, Any], node_name: str) -> dict[str, Any]:
        """The scheduler bound the pod: the watch reports it on ``node_name``."""
        out = bound(pod_obj, node_name)
        self.state.upsert_pod(out)
        return out

    def place(self, pod_obj: Mapping[str, Any], names: Sequence[str] = ALL_NODES) -> str | None:
        """Filter, then bind to the first passing node (what the scheduler does); the node or ``None``."""
        decision = self.filter(pod_obj, names)
        if not decision.passing:
            return None
        self.bind(pod_obj, decision.passing[0])
        return str(decision.passing[0])
