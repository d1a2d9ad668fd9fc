"""Self-managed serving certificates: one Secret shared by the replicas, renewed in place; CA injection."""

from __future__ import annotations

import base64
import copy
import datetime
from collections.abc import Mapping, Sequence
from typing import Any, cast

from webhook.kube.client import JSON, KubeApiError, KubeClient, ResourceRef
from webhook.kube.selfcert import (
    _secret_body,
    certs_from_secret,
    ensure_serving_secret,
    inject_ca_bundle,
    issue,
    service_dns_names,
)
from webhook.workloads.base import apply_patch

NAMES = service_dns_names("kube-queue-webhook", "kube-queue")


class FakeClient:
    """Just enough of KubeClient: objects by (plural, namespace, name), resourceVersion checks."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], JSON] = {}
        self.writes: list[str] = []
        self.lose_next_create = False

    def _key(self, ref: ResourceRef, name: str, namespace: str | None) -> tuple[str, str | None, str]:
        return (ref.plural, namespace, name)

    async def get(self, ref: ResourceRef, name: str, namespace: str | None = None) -> JSON:
        try:
            return copy.deepcopy(self.objects[self._key(ref, name, namespace)])
        except KeyError:
            raise KubeApiError(404, "NotFound") from None

    async def create(self, ref: ResourceRef, body: Mapping[str, Any], namespace: str | None = None) -> JSON:
        key = self._key(ref, body["metadata"]["name"], namespace)
        if self.lose_next_create:
            # Another replica created it between our read and our create.
            self.lose_next_create = False
            self.objects[key] = _secret_body(key[2], namespace or "", issue(NAMES), None)
            self.objects[key]["metadata"]["resourceVersion"] = "1"
            raise KubeApiError(409, "AlreadyExists")
        self.writes.append("create")
        stored = {**copy.deepcopy(dict(body)), "metadata": {**body["metadata"], "resourceVersion": "1"}}
        self.objects[key] = stored
        return stored

    async def replace(self, ref: ResourceRef, name: str, body: Mapping[str, Any], namespace: str | None = None) -> JSON:
        key = self._key(ref, name, namespace)
        current = self.objects[key]
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise KubeApiError(409, "Conflict")
        self.writes.append("replace")
        version = str(int(current["metadata"]["resourceVersion"]) + 1)
        self.objects[key] = {**copy.deepcopy(dict(body)), "metadata": {**body["metadata"], "resourceVersion": version}}
        return self.objects[key]

    async def json_patch(
        self, ref: ResourceRef, name: str, ops: Sequence[Mapping[str, Any]], namespace: str | None = None
    ) -> JSON:
        key = self._key(ref, name, namespace)
        self.objects[key] = apply_patch(self.objects[key], ops)
        self.writes.append(f"patch {ref.plural}")
        return self.objects[key]


def client(fake: FakeClient) -> KubeClient:
    return cast(KubeClient, fake)


async def test_first_replica_creates_the_secret_and_the_next_reuses_it() -> None:
    fake = FakeClient()
    first = await ensure_serving_secret(client(fake), "kube-queue", "tls", NAMES)
    second = await ensure_serving_secret(client(fake), "kube-queue", "tls", NAMES)
    assert first == second
    assert fake.writes == ["create"]


async def test_losing_the_creation_race_uses_the_winners_secret() -> None:
    fake = FakeClient()
    fake.lose_next_create = True
    certs = await ensure_serving_secret(client(fake), "kube-queue", "tls", NAMES)
    stored = certs_from_secret(fake.objects[("secrets", "kube-queue", "tls")])
    assert certs == stored


async def test_a_certificate_close_to_expiry_is_renewed_by_the_same_ca() -> None:
    fake = FakeClient()
    first = await ensure_serving_secret(client(fake), "kube-queue", "tls", NAMES)
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=340)
    renewed = await ensure_serving_secret(client(fake), "kube-queue", "tls", NAMES, now=later)
    assert renewed.cert != first.cert
    assert renewed.ca_cert == first.ca_cert
    assert fake.writes == ["create", "replace"]


async def test_ca_bundle_is_injected_where_it_differs() -> None:
    fake = FakeClient()
    hooks = [{"name": "a.x", "clientConfig": {"service": {}}}, {"name": "b.x", "clientConfig": {"service": {}}}]
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        fake.objects[(plural, None, "kube-queue")] = {
            "metadata": {"name": "kube-queue"},
            "webhooks": copy.deepcopy(hooks),
        }
    assert await inject_ca_bundle(client(fake), ["kube-queue", "missing"], b"CA") == 2
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        for hook in fake.objects[(plural, None, "kube-queue")]["webhooks"]:
            assert hook["clientConfig"]["caBundle"] == base64.b64encode(b"CA").decode()
    assert await inject_ca_bundle(client(fake), ["kube-queue"], b"CA") == 0
