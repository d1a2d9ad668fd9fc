"""A small raw-JSON Kubernetes client on top of kubernetes-asyncio's connection handling.

kubernetes-asyncio brings kubeconfig / in-cluster loading, TLS and token refresh; its generated models are
slow and its HTTP client has no default timeout. :class:`KubeClient` keeps the former and replaces the
latter: every request carries an explicit timeout, bodies are ``dict`` decoded with orjson, and errors are
:class:`KubeApiError` with the HTTP status and the apiserver's ``Status`` message.
"""

from __future__ import annotations

import logging
import os
import urllib.request
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

import aiohttp
import orjson
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from webhook.api.errors import ApiStatusError, status_error
from webhook.api.kinds import Kind, api_path, selector_query
from webhook.api.names import CLIENT_USER_AGENT as USER_AGENT
from webhook.api.objects import Obj, plain

log = logging.getLogger(__name__)

JSON = dict[str, object]
"""A decoded answer of the API server, read as an ``Obj``: its fields are narrowed where they are read."""

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Client-side timeouts in seconds. The apiserver's own limit for ordinary requests is 60 s."""

    connect: float = 5.0
    """TCP connect + TLS handshake."""
    request: float = 30.0
    """Whole request (send, wait, read) for everything but watches."""
    watch_margin: float = 30.0
    """A watch may be silent until its server-side ``timeoutSeconds``; reads may wait that long plus this."""


class KubeApiError(ApiStatusError):
    """A non-2xx answer to the shells' client (``status`` 0 for a transport failure or timeout); the fields
    and questions are :class:`webhook.api.errors.ApiStatusError`'s."""

    def __str__(self) -> str:
        head = f"HTTP {self.status} {self.reason}"
        return f"{head}: {self.message}" if self.message else head


def _error_from(status: int, raw: bytes) -> KubeApiError:
    return status_error(KubeApiError, status, "Error", raw, limit=200)


class _TransportErrors:
    """Within it, a timeout or a connection failure of ``what`` becomes a :class:`KubeApiError` with status 0
    (``late`` says what did not come in time). A class, not a generator: a watch enters it once a line."""

    __slots__ = ("late", "what")

    def __init__(self, what: str, late: str) -> None:
        self.what = what
        self.late = late

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        if isinstance(error, TimeoutError):
            raise KubeApiError(0, "Timeout", f"{self.what}: {self.late}") from error
        if isinstance(error, aiohttp.ClientError):
            raise KubeApiError(0, "ConnectionError", f"{self.what}: {error}") from error


@dataclass(frozen=True, slots=True)
class ResourceRef:
    """Where a resource lives: ``ResourceRef("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees")``.

    ``group`` is ``""`` for the core group. ``namespace`` narrows collection paths to one namespace
    (``None`` = all namespaces, or a cluster-scoped resource).
    """

    group: str
    version: str
    plural: str
    namespace: str | None = None

    @classmethod
    def of(cls, kind: Kind, namespace: str | None = None) -> ResourceRef:
        """The reference of one of :mod:`webhook.api.kinds`, narrowed to ``namespace`` when given."""
        return cls(kind.group, kind.version, kind.plural, namespace)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, name: str | None = None, namespace: str | None = None, subresource: str | None = None) -> str:
        """The URL path of the collection, or of one object when ``name`` is given."""
        ns = namespace if namespace is not None else self.namespace
        return api_path(self.group, self.version, self.plural, namespace=ns, name=name, subresource=subresource)

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.plural}.{self.group or 'core'}/{self.version}{where}"


async def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> k8s_client.Configuration:
    """Connection settings: the given kubeconfig; else in-cluster (service account) when running in a pod;
    else ``$KUBECONFIG`` / ``~/.kube/config``."""
    configuration: k8s_client.Configuration = type.__call__(k8s_client.Configuration)  # its __init__ is untyped
    if kubeconfig is None and os.environ.get(IN_CLUSTER_ENV):
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return configuration
    if kubeconfig is None:
        kubeconfig = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
    await k8s_config.load_kube_config(
        config_file=kubeconfig, context=context, client_configuration=configuration, persist_config=False
    )
    return configuration


def proxy_from_environment(configuration: k8s_client.Configuration) -> None:
    """Set the configuration's proxy from ``HTTPS_PROXY``/``HTTP_PROXY`` (honouring ``NO_PROXY``) once, when the
    kubeconfig names none: what client-go does, decided at start instead of on every request."""
    if getattr(configuration, "proxy", None):
        return
    url = urlsplit(str(getattr(configuration, "host", "") or ""))
    if not url.hostname or urllib.request.proxy_bypass(url.hostname):
        return
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy:
        configuration.proxy = proxy


def without_per_request_environment(api: k8s_client.ApiClient) -> None:
    """Stop the HTTP session from reading the environment on every request.

    kubernetes-asyncio opens its session with ``trust_env=True``: aiohttp then parses the proxy variables and
    reads ``~/.netrc`` (in a thread) for each request, which cost the controller about a tenth of its CPU
    during a burst of admissions (issue 23). Kubernetes credentials come from the kubeconfig, never from
    ``.netrc``, and the proxy is read once by :func:`proxy_from_environment`. The session keeps its connector
    (TLS settings, pool size)."""
    rest = api.rest_client
    session = rest.pool_manager
    connector = session.connector
    session.detach()
    rest.pool_manager = aiohttp.ClientSession(connector=connector, trust_env=False, read_bufsize=2**21)


class KubeClient:
    """Raw-JSON requests with explicit timeouts. Close it (``await client.close()``) when done."""

    def __init__(
        self, api: k8s_client.ApiClient, timeouts: Timeouts = Timeouts(), user_agent: str = USER_AGENT
    ) -> None:
        self.api = api
        self.timeouts = timeouts
        self.user_agent = user_agent
        """Sent on every request. The API server names the field manager of each write after it (the part
        before ``/``), so ``managedFields`` say which component set a field, and its audit log who called."""

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        timeouts: Timeouts = Timeouts(),
        user_agent: str = USER_AGENT,
    ) -> KubeClient:
        """A client from a kubeconfig file or the in-cluster service account (see :func:`load_configuration`)."""
        configuration = await load_configuration(kubeconfig, context)
        proxy_from_environment(configuration)
        api = k8s_client.ApiClient(configuration=configuration)
        without_per_request_environment(api)
        return cls(api, timeouts, user_agent)

    async def close(self) -> None:
        await self.api.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # Requests ----------------------------------------------------------------------------------------------
    def _timeout(self, read: float | None = None) -> aiohttp.ClientTimeout:
        if read is None:
            return aiohttp.ClientTimeout(
                total=self.timeouts.request, connect=self.timeouts.connect, sock_connect=self.timeouts.connect
            )
        return aiohttp.ClientTimeout(
            total=None, connect=self.timeouts.connect, sock_connect=self.timeouts.connect, sock_read=read
        )

    async def _send(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        *,
        body: object = None,
        content_type: str = "application/json",
        read_timeout: float | None = None,
    ) -> aiohttp.ClientResponse:
        """Send one request on the client's own session, its body encoded once with orjson.

        kubernetes-asyncio's ``call_api`` walks every body in Python (``sanitize_for_serialization``) before
        encoding it: with a patch that carries a job's whole spec this was the controller's largest cost in a
        burst of admissions (issue 23). This keeps what ``call_api`` brings (the session with its TLS context
        and client certificate, the proxy, the TLS server name, default headers, the bearer token with its
        refresh hook) and skips the walk."""
        api = self.api
        rest = api.rest_client
        headers: dict[str, str] = {
            **api.default_headers, "Accept": "application/json", "Content-Type": content_type,
            "User-Agent": self.user_agent,
        }
        if api.cookie:
            headers["Cookie"] = api.cookie
        queries: list[tuple[str, str]] = list(query)
        await api.update_params_for_auth(headers, queries, ["BearerToken"])
        url = str(api.configuration.host) + path
        if queries:
            url += "?" + urlencode(queries)
        data = None if body is None else orjson.dumps(body, default=plain)
        with _TransportErrors(f"{method} {path}", "no answer in time"):
            response: aiohttp.ClientResponse = await rest.pool_manager.request(
                method, url, headers=headers, data=data, timeout=self._timeout(read_timeout),
                proxy=rest.proxy or None, proxy_headers=rest.proxy_headers or None,
                server_hostname=rest.server_hostname or None,  # unset: None, aiohttp's default
            )
        return response

    async def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        *,
        body: object = None,
        content_type: str = "application/json",
    ) -> JSON:
        """One request; the decoded JSON answer. Raises :class:`KubeApiError` on a non-2xx status."""
        response = await self._send(method, path, query, body=body, content_type=content_type)
        try:
            with _TransportErrors(f"{method} {path}", "answer not read in time"):
                raw = await response.read()
        finally:
            response.release()
        if not 200 <= response.status < 300:
            raise _error_from(response.status, raw)
        if not raw:
            return {}
        decoded = orjson.loads(raw)
        return decoded if isinstance(decoded, dict) else {"value": decoded}

    async def get(self, ref: ResourceRef, name: str, namespace: str | None = None) -> JSON:
        return await self.request("GET", ref.path(name, namespace))

    async def create(self, ref: ResourceRef, body: Obj, namespace: str | None = None) -> JSON:
        return await self.request("POST", ref.path(None, namespace), body=dict(body))

    async def replace(self, ref: ResourceRef, name: str, body: Obj, namespace: str | None = None) -> JSON:
        return await self.request("PUT", ref.path(name, namespace), body=dict(body))

    async def json_patch(
        self,
        ref: ResourceRef,
        name: str,
        ops: Sequence[Obj],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> JSON:
        """Apply RFC 6902 operations (``application/json-patch+json``)."""
        return await self.request(
            "PATCH",
            ref.path(name, namespace, subresource),
            body=[dict(op) for op in ops],
            content_type="application/json-patch+json",
        )

    async def merge_patch(
        self,
        ref: ResourceRef,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> JSON:
        """Apply an RFC 7386 merge patch (``application/merge-patch+json``)."""
        return await self.request(
            "PATCH",
            ref.path(name, namespace, subresource),
            body=dict(patch),
            content_type="application/merge-patch+json",
        )

    async def list_page(
        self,
        ref: ResourceRef,
        *,
        limit: int = 500,
        continue_token: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> JSON:
        """One page of a list (``items``, ``metadata.resourceVersion``, ``metadata.continue``)."""
        query: list[tuple[str, str]] = [("limit", str(limit))]
        if continue_token:
            query.append(("continue", continue_token))
        query += selector_query(label_selector, field_selector)
        return await self.request("GET", ref.path(), query)

    @asynccontextmanager
    async def watch(
        self,
        ref: ResourceRef,
        *,
        resource_version: str,
        timeout_seconds: int,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[AsyncIterator[JSON]]:
        """Open a watch with bookmarks; entering connects (and raises :class:`KubeApiError` on refusal),
        iterating yields events (``{"type": ..., "object": {...}}``) until the server ends the stream."""
        query: list[tuple[str, str]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
            *selector_query(label_selector, field_selector),
        ]
        read = timeout_seconds + self.timeouts.watch_margin
        response = await self._send("GET", ref.path(), query, read_timeout=read)
        try:
            if not 200 <= response.status < 300:
                raise _error_from(response.status, await response.read())
            yield _events(response, ref)
        finally:
            response.close()


async def _events(response: aiohttp.ClientResponse, ref: ResourceRef) -> AsyncIterator[JSON]:
    transport_errors = _TransportErrors(f"watch {ref}", "silent for too long")
    while True:
        with transport_errors:
            line = await response.content.readline()
        if not line:
            return
        line = line.strip()
        if not line:
            continue
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            log.warning("watch=%s event=undecodable line=%r", ref, line[:200])
            continue
        if isinstance(event, dict):
            yield event
