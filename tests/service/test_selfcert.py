"""Self-managed serving certificates: one Secret shared by the replicas, renewed in place; CA injection."""

from __future__ import annotations

import base64
import copy
import datetime

from tests.kubefake import Kind, parse_path
from tests.service.kubeclient_fake import CORE, FakeApi
from webhook.kube.selfcert import (
    _secret_body,
    certs_from_secret,
    ensure_serving_secret,
    inject_ca_bundle,
    issue,
    service_dns_names,
)

NAMES = service_dns_names("kube-queue-webhook", "kube-queue")


SECRETS: Kind = ("", "v1", "secrets")
WEBHOOK_CONFIGURATIONS: tuple[Kind, ...] = (
    ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"),
)


def fake_api() -> FakeApi:
    """The one fake apiserver, serving Secrets and the webhook configurations."""
    return FakeApi({*CORE, SECRETS, *WEBHOOK_CONFIGURATIONS})


def writes(api: FakeApi) -> list[str]:
    """The writes sent, as ``create``, ``replace`` or ``patch <plural>``."""
    names = {"POST": "create", "PUT": "replace"}
    return [
        names.get(method) or f"patch {parse_path(path)[0][2]}"
        for method, path in api.calls
        if method in ("POST", "PUT", "PATCH")
    ]


async def test_first_replica_creates_the_secret_and_the_next_reuses_it() -> None:
    fake = fake_api()
    first = await ensure_serving_secret(fake, "kube-queue", "tls", NAMES)
    second = await ensure_serving_secret(fake, "kube-queue", "tls", NAMES)
    assert first == second
    assert writes(fake) == ["create"]


async def test_losing_the_creation_race_uses_the_winners_secret() -> None:
    fake = fake_api()
    winner = _secret_body("tls", "kube-queue", issue(NAMES), None)

    def another_replica_creates_it_first(method: str, path: str) -> None:
        if method == "POST" and fake.items.get(SECRETS, {}).get(("kube-queue", "tls")) is None:
            fake.put(SECRETS, copy.deepcopy(winner))

    fake.before_write = another_replica_creates_it_first
    certs = await ensure_serving_secret(fake, "kube-queue", "tls", NAMES)
    stored = certs_from_secret(fake.obj(SECRETS, "tls", "kube-queue"))
    assert stored == certs_from_secret(winner)
    assert certs == stored


async def test_a_certificate_close_to_expiry_is_renewed_by_the_same_ca() -> None:
    fake = fake_api()
    first = await ensure_serving_secret(fake, "kube-queue", "tls", NAMES)
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=340)
    renewed = await ensure_serving_secret(fake, "kube-queue", "tls", NAMES, now=later)
    assert renewed.cert != first.cert
    assert renewed.ca_cert == first.ca_cert
    assert writes(fake) == ["create", "replace"]


async def test_ca_bundle_is_injected_where_it_differs() -> None:
    fake = fake_api()
    hooks = [{"name": "a.x", "clientConfig": {"service": {}}}, {"name": "b.x", "clientConfig": {"service": {}}}]
    for kind in WEBHOOK_CONFIGURATIONS:
        fake.put(kind, {"metadata": {"name": "kube-queue"}, "webhooks": copy.deepcopy(hooks)})
    assert await inject_ca_bundle(fake, ["kube-queue", "missing"], b"CA") == 2
    for kind in WEBHOOK_CONFIGURATIONS:
        for hook in fake.obj(kind, "kube-queue")["webhooks"]:
            assert hook["clientConfig"]["caBundle"] == base64.b64encode(b"CA").decode()
    assert writes(fake) == ["patch mutatingwebhookconfigurations", "patch validatingwebhookconfigurations"]
    assert await inject_ca_bundle(fake, ["kube-queue"], b"CA") == 0
    assert len(writes(fake)) == 2
