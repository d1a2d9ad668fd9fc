"""Who asked, for a request the API server's aggregator passed on (docs/security.md, "The controller's read API").

The API server authenticates and authorizes a user, then proxies the request to an aggregated API with the
user's name and groups in request headers. Those headers are trusted only from a client certificate signed by
the front-proxy CA whose common name is one of the allowed names: both are published in the ConfigMap
``kube-system/extension-apiserver-authentication`` (the role ``extension-apiserver-authentication-reader``
reads it). :func:`trust_front_proxy` makes the serving TLS context ask for such a certificate (optional: the
admission webhooks' callers send none) and trust that CA alone; :func:`caller_of` checks a request.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web

from webhook.api import kinds
from webhook.api.objects import Obj
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef

log = logging.getLogger(__name__)

AUTHENTICATION_NAMESPACE = "kube-system"
AUTHENTICATION_CONFIGMAP = "extension-apiserver-authentication"
CONFIGMAPS = ResourceRef.of(kinds.CONFIG_MAP)


@dataclass(frozen=True, slots=True)
class FrontProxy:
    """The API server's front proxy as the ConfigMap describes it."""

    ca: str
    """The PEM of the CA that signs its client certificate."""
    allowed_names: frozenset[str]
    """The common names it may present (empty: any certificate the CA signed)."""
    user_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)


@dataclass(frozen=True, slots=True)
class Caller:
    """A user the API server authenticated and authorized before it passed the request on."""

    user: str
    groups: tuple[str, ...]


FRONT_PROXY = web.AppKey("front_proxy", FrontProxy)
"""The front proxy ``kq serve`` trusts, on its application (absent: it serves no aggregated API)."""


def _names(data: Obj, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
    try:
        value = json.loads(str(data.get(key) or "null"))
    except ValueError:
        return default
    if not isinstance(value, list):
        return default
    return tuple(str(name) for name in value if isinstance(name, str) and name) or default


def front_proxy_of(data: Obj) -> FrontProxy | None:
    """The front proxy of the ConfigMap's ``data`` (``None`` when it names no requestheader CA)."""
    ca = data.get("requestheader-client-ca-file")
    if not isinstance(ca, str) or "BEGIN CERTIFICATE" not in ca:
        return None
    return FrontProxy(
        ca=ca,
        allowed_names=frozenset(_names(data, "requestheader-allowed-names")),
        user_headers=_names(data, "requestheader-username-headers", ("X-Remote-User",)),
        group_headers=_names(data, "requestheader-group-headers", ("X-Remote-Group",)),
    )


async def read_front_proxy(client: KubeClient) -> FrontProxy | None:
    """The front proxy the API server publishes; ``None`` (logged) when it cannot be read."""
    try:
        configmap = await client.get(CONFIGMAPS, AUTHENTICATION_CONFIGMAP, AUTHENTICATION_NAMESPACE)
    except KubeApiError as error:
        log.warning("component=serve event=front_proxy_unreadable configmap=%s/%s error=%r: the read API "
                    "(jobsummaries) answers 503; bind the role extension-apiserver-authentication-reader",
                    AUTHENTICATION_NAMESPACE, AUTHENTICATION_CONFIGMAP, error.one_line())
        return None
    data = configmap.get("data") if isinstance(configmap, Mapping) else None
    front = front_proxy_of(data) if isinstance(data, Mapping) else None
    if front is None:
        log.warning("component=serve event=front_proxy_absent configmap=%s/%s: the API server has no "
                    "--requestheader-client-ca-file; the read API (jobsummaries) answers 503",
                    AUTHENTICATION_NAMESPACE, AUTHENTICATION_CONFIGMAP)
    return front


def trust_front_proxy(context: ssl.SSLContext, front: FrontProxy) -> None:
    """Ask every client for a certificate (optional) and verify one against the front-proxy CA alone."""
    context.load_verify_locations(cadata=front.ca)
    context.verify_mode = ssl.CERT_OPTIONAL


def caller_of(request: web.Request, front: FrontProxy) -> Caller | None:
    """The user the front proxy says asked; ``None`` unless the connection presented a certificate of the
    front-proxy CA (verified in the handshake) with an allowed common name, and the request names a user."""
    transport = request.transport
    peer = transport.get_extra_info("peercert") if transport is not None else None
    if not peer:
        return None
    common_names = {str(value) for rdn in peer.get("subject", ()) for key, value in rdn if key == "commonName"}
    if front.allowed_names and not common_names & front.allowed_names:
        return None
    user = next((request.headers[name] for name in front.user_headers if request.headers.get(name)), "")
    if not user:
        return None
    groups = tuple(group for name in front.group_headers for group in request.headers.getall(name, ()))
    return Caller(user, groups)
