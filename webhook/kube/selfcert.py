"""A service that keeps its own serving certificate in a Secret and its CA in its webhook configurations.

For ``kubectl apply -k manifests/`` on any cluster without cert-manager: every replica calls
:func:`ensure_serving_secret` at start and then periodically. The first creates a CA and a serving
certificate in the Secret (a 409 means another replica won: use its Secret); a certificate close to expiry,
or one whose names no longer match, is re-issued by the same CA (optimistic concurrency on
``resourceVersion``). :func:`inject_ca_bundle` writes the CA into every webhook of the named
configurations when it differs. The CA lives ten years, so the bundle stays stable across renewals.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import logging
from collections.abc import Iterable, Mapping, Sequence

from cryptography import x509

from webhook import pki
from webhook.api import kinds
from webhook.api.objects import Doc, Obj
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef
from webhook.kube.servingcerts import SECRET_KEYS, ServingCerts

log = logging.getLogger(__name__)

SECRETS = ResourceRef.of(kinds.SECRET)
MUTATING = ResourceRef.of(kinds.MUTATING_WEBHOOK_CONFIGURATION)
VALIDATING = ResourceRef.of(kinds.VALIDATING_WEBHOOK_CONFIGURATION)
API_SERVICES = ResourceRef.of(kinds.API_SERVICE)
RENEW_BEFORE = datetime.timedelta(days=30)
CERT_DAYS = 365


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names a Service is reached by from inside the cluster."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def _decode(data: Obj, key: str) -> bytes | None:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        return None
    try:
        return base64.b64decode(value)
    except ValueError:
        return None


def certs_from_secret(secret: Obj) -> ServingCerts | None:
    """The certificates a Secret holds (``None`` when any part is missing)."""
    data = secret.get("data")
    if not isinstance(data, Mapping):
        return None
    parts = [_decode(data, key) for key in SECRET_KEYS]
    if any(part is None for part in parts):
        return None
    ca_cert, ca_key, cert, key = (part or b"" for part in parts)
    return ServingCerts(ca_cert, ca_key, cert, key)


def needs_renewal(
    certs: ServingCerts, dns_names: Sequence[str], ip_addresses: Sequence[str], now: datetime.datetime
) -> str | None:
    """Why the serving certificate must be re-issued (``None`` when it is fine)."""
    try:
        cert = x509.load_pem_x509_certificate(certs.cert)
        ca = x509.load_pem_x509_certificate(certs.ca_cert)
    except ValueError:
        return "the stored certificate does not parse"
    if ca.not_valid_after_utc - now < RENEW_BEFORE:
        return "the CA expires soon"
    if cert.not_valid_after_utc - now < RENEW_BEFORE:
        return f"the certificate expires on {cert.not_valid_after_utc:%Y-%m-%d}"
    if cert.issuer != ca.subject:
        return "the certificate was not issued by the stored CA"
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "the certificate has no subject alternative names"
    have_dns = set(sans.get_values_for_type(x509.DNSName))
    have_ips = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    missing = [n for n in dns_names if n not in have_dns] + [
        ip for ip in ip_addresses if str(ipaddress.ip_address(ip)) not in have_ips
    ]
    if missing:
        return f"the certificate lacks the names {', '.join(missing)}"
    return None


def issue(
    dns_names: Sequence[str], ip_addresses: Sequence[str] = (), ca: tuple[bytes, bytes] | None = None
) -> ServingCerts:
    """A serving certificate for the names (and a new CA unless ``ca`` is given)."""
    ca_cert, ca_key = ca if ca is not None else pki.make_ca("kube-queue-webhook-ca")
    cert, key = pki.issue_cert(
        ca_cert,
        ca_key,
        dns_names[0] if dns_names else "kube-queue-webhook",
        dns_names=dns_names,
        ip_addresses=ip_addresses,
        days=CERT_DAYS,
    )
    return ServingCerts(ca_cert, ca_key, cert, key)


def _secret_body(name: str, namespace: str, certs: ServingCerts, resource_version: str | None = None) -> Doc:
    metadata: Doc = {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "kube-queue"}}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "kubernetes.io/tls",
        "data": certs.secret_data(),
    }


async def ensure_serving_secret(
    client: KubeClient,
    namespace: str,
    name: str,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    *,
    now: datetime.datetime | None = None,
) -> ServingCerts:
    """The serving certificates in Secret ``namespace/name``, created or renewed when needed."""
    moment = now if now is not None else datetime.datetime.now(datetime.UTC)
    for _attempt in range(5):
        try:
            secret = await client.get(SECRETS, name, namespace)
        except KubeApiError as error:
            if not error.not_found:
                raise
            certs = issue(dns_names, ip_addresses)
            try:
                await client.create(SECRETS, _secret_body(name, namespace, certs), namespace)
            except KubeApiError as create_error:
                if create_error.conflict:
                    continue  # another replica created it first: read theirs
                raise
            log.info("component=certs event=created secret=%s/%s", namespace, name)
            return certs
        certs_or_none = certs_from_secret(secret)
        why = "the secret is incomplete" if certs_or_none is None else None
        if certs_or_none is not None:
            why = needs_renewal(certs_or_none, dns_names, ip_addresses, moment)
            if why is None:
                return certs_or_none
        keep_ca = None
        if certs_or_none is not None and why not in ("the CA expires soon", "the stored certificate does not parse"):
            keep_ca = (certs_or_none.ca_cert, certs_or_none.ca_key)
        renewed = issue(dns_names, ip_addresses, keep_ca)
        metadata = secret.get("metadata") if isinstance(secret.get("metadata"), Mapping) else {}
        version = str(metadata.get("resourceVersion") or "") if isinstance(metadata, Mapping) else ""
        try:
            await client.replace(SECRETS, name, _secret_body(name, namespace, renewed, version or None), namespace)
        except KubeApiError as error:
            if error.conflict:
                continue  # another replica renewed it: read theirs
            raise
        log.info("component=certs event=renewed secret=%s/%s reason=%r", namespace, name, why)
        return renewed
    raise KubeApiError(409, "Conflict", f"secret {namespace}/{name} keeps changing; giving up for now")


async def inject_ca_bundle(client: KubeClient, configuration_names: Iterable[str], ca_cert: bytes) -> int:
    """Set ``caBundle`` on every webhook of the named Mutating/ValidatingWebhookConfigurations where it
    differs; returns how many configurations were patched (absent ones are skipped with a warning)."""
    bundle = base64.b64encode(ca_cert).decode("ascii")
    patched = 0
    for name in configuration_names:
        for ref in (MUTATING, VALIDATING):
            try:
                config = await client.get(ref, name)
            except KubeApiError as error:
                if error.not_found:
                    log.warning("component=certs event=no_configuration kind=%s name=%s", ref.plural, name)
                    continue
                raise
            hooks = config.get("webhooks")
            if not isinstance(hooks, list):
                continue
            ops: list[Doc] = []
            for index, hook in enumerate(hooks):
                if not isinstance(hook, Mapping) or not isinstance(hook.get("clientConfig"), Mapping):
                    continue
                if hook["clientConfig"].get("caBundle") == bundle:
                    continue
                # The test guards against the list changing between our read and the patch.
                ops.append({"op": "test", "path": f"/webhooks/{index}/name", "value": hook.get("name")})
                ops.append({"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": bundle})
            if ops:
                await client.json_patch(ref, name, ops)
                patched += 1
                log.info(
                    "component=certs event=ca_injected kind=%s name=%s webhooks=%d", ref.plural, name, len(ops) // 2
                )
    return patched


async def inject_api_service_ca(client: KubeClient, name: str, ca_cert: bytes) -> bool:
    """Set the APIService's ``caBundle`` where it differs; returns whether it was patched (an absent APIService
    or one this identity may not read is skipped with a log line: the read API is optional)."""
    bundle = base64.b64encode(ca_cert).decode("ascii")
    try:
        service = await client.get(API_SERVICES, name)
        spec = service.get("spec")
        if isinstance(spec, Mapping) and spec.get("caBundle") == bundle:
            return False
        await client.merge_patch(API_SERVICES, name, {"spec": {"caBundle": bundle}})
    except KubeApiError as error:
        if error.not_found or error.status == 403:
            log.info("component=certs event=no_api_service name=%s reason=%s", name, error.one_line())
            return False
        raise
    log.info("component=certs event=ca_injected kind=apiservices name=%s", name)
    return True
