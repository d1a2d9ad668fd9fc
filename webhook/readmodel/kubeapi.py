"""Synchronous Kubernetes API access for the developer commands (``kq list``, ``kq why``, ``kq logs``...)
and the web console, which runs each call in a worker thread.

The service uses :mod:`webhook.kube.client` (kubernetes-asyncio, aiohttp); a command-line tool that runs for a
fraction of a second cannot afford their import time, so this module speaks to the API server with the
standard library only (``http.client`` + ``ssl``), reading kubeconfig files itself:

* kubeconfig: ``--kubeconfig``, else every file of ``$KUBECONFIG`` (merged, first wins, as kubectl does),
  else ``~/.kube/config``, else the in-cluster service account;
* credentials: client certificates (file or ``-data``), bearer tokens (``token`` / ``tokenFile``), basic auth,
  and ``exec`` credential plugins (``client.authentication.k8s.io`` ``ExecCredential``);
* the namespace of the current (or ``--context``) context, else ``default``.

:class:`KubeApi` is the interface the commands use (``request`` and ``stream_lines``); tests give them a fake.
Errors are :class:`ApiError`, whose :meth:`ApiError.one_line` is what a user sees.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlencode, urlsplit

from webhook.api import kinds
from webhook.api.errors import ApiStatusError, status_error
from webhook.api.kinds import Kind, api_path, selector_query
from webhook.api.names import TABLE_MEDIA_TYPE
from webhook.api.objects import Doc, Obj
from webhook.readmodel.kubeconfig import ConfigError, Connection, load_connection
from webhook.readmodel.paging import continue_of, decode, prefetched, with_token

if TYPE_CHECKING:
    from http.client import HTTPConnection

DEFAULT_TIMEOUT = 30.0


class ApiError(ApiStatusError):
    """A refused or failed request of ``kq``'s client (:class:`webhook.api.errors.ApiStatusError`)."""


@dataclass(frozen=True, slots=True)
class Ref:
    """A resource: ``Ref("batch", "v1", "jobs")``; ``group`` is ``""`` for the core group."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    @classmethod
    def of(cls, kind: Kind) -> Ref:
        """The reference of one of :mod:`webhook.api.kinds`."""
        return cls(kind.group, kind.version, kind.plural, kind.namespaced)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The collection (all namespaces when ``namespace`` is ``None``) or one object's path."""
        return api_path(self.group, self.version, self.plural, namespace=namespace if self.namespaced else None,
                        name=name, subresource=subresource)


JOBS = Ref.of(kinds.JOB)
PODS = Ref.of(kinds.POD)
EVENTS = Ref.of(kinds.EVENT)
NODES = Ref.of(kinds.NODE)
NAMESPACES = Ref.of(kinds.NAMESPACE)
PRIORITY_CLASSES = Ref.of(kinds.PRIORITY_CLASS)
TREES = Ref.of(kinds.ELASTIC_QUOTA_TREE)
QUEUES = Ref.of(kinds.QUEUE)
BUDGETS = Ref.of(kinds.POD_DISRUPTION_BUDGET)
DEVICE_CLASSES = Ref.of(kinds.DEVICE_CLASS)
CLAIM_TEMPLATES = Ref.of(kinds.RESOURCE_CLAIM_TEMPLATE)
CLAIMS = Ref.of(kinds.RESOURCE_CLAIM)
LIMIT_RANGES = Ref.of(kinds.LIMIT_RANGE)
RUNTIME_CLASSES = Ref.of(kinds.RUNTIME_CLASS)


class KubeApi:
    """What the commands need from an API server. Subclasses implement :meth:`request` and
    :meth:`stream_lines`; the rest is built on them."""

    namespace: str = "default"
    """The namespace of the kubeconfig's context (``default`` when it names none)."""

    def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        body: Doc | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        """One request; the decoded JSON answer (``{}`` when empty, ``{"text": ...}`` when it is not a JSON object).
        :class:`ApiError` unless 2xx."""
        raise NotImplementedError

    def table(self, path: str, query: Sequence[tuple[str, str]] = ()) -> Obj:
        """A GET that accepts a Table (``meta.k8s.io/v1``) before plain JSON: the decoded answer, whichever the
        server chose (here, one that serves no Table)."""
        return self.request("GET", path, query)

    def stream_lines(self, path: str, query: Sequence[tuple[str, str]] = ()) -> Iterator[str]:
        """A streamed GET (``follow=true`` logs, watches): its lines, as they come, without line ends."""
        raise NotImplementedError

    def text(self, path: str, query: Sequence[tuple[str, str]] = ()) -> str:
        """A GET whose answer is plain text (logs)."""
        return "".join(line + "\n" for line in self.stream_lines(path, query))

    # Helpers ------------------------------------------------------------------------------------------------
    def get(self, ref: Ref, name: str, namespace: str | None = None) -> Obj:
        return self.request("GET", ref.path(namespace, name))

    def list(
        self,
        ref: Ref,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        """Every object of a collection (pages of :data:`~webhook.readmodel.paging.PAGE_SIZE` followed to the
        end)."""
        items: list[Obj] = []
        for page in self.pages(ref.path(namespace), selector_query(label_selector, field_selector)):
            listed = page.get("items")
            if isinstance(listed, list):
                items.extend(item for item in listed if isinstance(item, dict))
        return items

    def pages(self, path: str, query: Sequence[tuple[str, str]]) -> Iterator[Obj]:
        """The decoded pages of a list, one after the other, followed to the end."""
        token = ""
        while True:
            page = self.request("GET", path, with_token(query, token))
            yield page
            token = continue_of(page)
            if not token:
                return

    def create(self, ref: Ref, body: Obj, namespace: str | None = None) -> Obj:
        return self.request("POST", ref.path(namespace), body=dict(body))

    def delete(self, ref: Ref, name: str, namespace: str | None = None) -> Obj:
        """Delete with background propagation (a job's pods go too)."""
        body: Doc = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        return self.request("DELETE", ref.path(namespace, name), body=body)


def _error(status: int, reason: str, raw: bytes) -> ApiError:
    return status_error(ApiError, status, reason, raw)


# HTTP -----------------------------------------------------------------------------------------------------------


def _ssl_context(connection: Connection) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if connection.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif connection.ca_pem:
        context = ssl.create_default_context(cadata=connection.ca_pem.decode("ascii", "replace"))
    credentials = connection.credentials
    if credentials.cert_pem and credentials.key_pem:
        # ssl only loads certificate chains from files: write them to private temporary files for a moment.
        with tempfile.TemporaryDirectory(prefix="kq-") as scratch:
            cert, key = Path(scratch) / "client.crt", Path(scratch) / "client.key"
            for path, data in ((cert, credentials.cert_pem), (key, credentials.key_pem)):
                path.touch(mode=0o600)
                path.write_bytes(data)
            context.load_cert_chain(str(cert), str(key))
    return context


class HttpApi(KubeApi):
    """:class:`KubeApi` over HTTPS (or HTTP) with keep-alive; one instance per thread."""

    def __init__(self, connection: Connection, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.connection = connection
        self.namespace = connection.namespace
        self.timeout = timeout
        parts = urlsplit(connection.server)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ConfigError(f"the kubeconfig's server {connection.server!r} is not an http(s) URL")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._prefix = parts.path.rstrip("/")
        self._ssl = _ssl_context(connection) if parts.scheme == "https" else None
        self._conn: HTTPConnection | None = None
        self._down: ApiError | None = None
        """Set once the server could not be reached: later requests fail at once instead of waiting again."""
        self.warnings: list[str] = []
        """``Warning`` headers of the last answer (admission webhooks' warnings, deprecations)."""

    def _open(self, timeout: float | None) -> HTTPConnection:
        import http.client  # noqa: PLC0415 - only when talking to a server

        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "kq"}
        if content_type:
            headers["Content-Type"] = content_type
        credentials = self.connection.credentials
        if credentials.token:
            headers["Authorization"] = f"Bearer {credentials.token}"
        elif credentials.basic:
            raw = f"{credentials.basic[0]}:{credentials.basic[1]}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(raw).decode()
        return headers

    def _url(self, path: str, query: Sequence[tuple[str, str]]) -> str:
        return self._prefix + path + (f"?{urlencode(list(query))}" if query else "")

    def _unreachable(self, error: BaseException) -> ApiError:
        what = error.strerror if isinstance(error, OSError) and error.strerror else str(error) or type(error).__name__
        if isinstance(error, ssl.SSLError):
            what = f"TLS failed ({error.reason or error})"
        self._down = ApiError(0, "Unreachable", f"cannot reach the API server {self.connection.server}: {what}")
        return self._down

    def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        body: Doc | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        payload = None if body is None else json.dumps(body).encode()
        return decode(self._exchange(method, self._url(path, query), payload, content_type))

    def table(self, path: str, query: Sequence[tuple[str, str]] = ()) -> Obj:
        return decode(self._exchange("GET", self._url(path, query), None, "", f"{TABLE_MEDIA_TYPE},application/json"))

    def pages(self, path: str, query: Sequence[tuple[str, str]]) -> Iterator[Obj]:
        """The pages of a list, the next fetched while the caller decodes one (:mod:`webhook.readmodel.paging`)."""
        return prefetched(lambda with_query: self._exchange("GET", self._url(path, with_query), None, ""), query)

    def _exchange(self, method: str, url: str, payload: bytes | None, content_type: str,
                  accept: str = "application/json") -> bytes:
        """One request, its raw answer; :class:`ApiError` unless 2xx."""
        if self._down is not None:
            raise self._down
        for _ in range(2):
            kept = self._conn is not None
            if self._conn is None:
                self._conn = self._open(self.timeout)
            try:
                headers = self._headers(content_type if payload else None)
                headers["Accept"] = accept
                self._conn.request(method, url, body=payload, headers=headers)
                response = self._conn.getresponse()
                raw = response.read()
            except (ConnectionResetError, BrokenPipeError):
                self._close()
                if kept:  # a kept-alive connection the server had closed while idle: once more on a new one
                    continue
                # A new connection, closed with no answer: the server is there (it took the connection) but
                # dropped this request, as the API server may when what it proxies hangs. Not marked down:
                # the caller's next request (a fallback) is tried.
                raise ApiError(0, "ConnectionClosed", f"the API server {self.connection.server} closed the "
                               f"connection without answering {method} {url.partition('?')[0]}") from None
            except (OSError, ssl.SSLError) as error:
                self._close()
                raise self._unreachable(error) from None
            except Exception as error:  # http.client.HTTPException and friends
                self._close()
                raise self._unreachable(error) from None
            self.warnings = [value for key, value in response.getheaders() if key.lower() == "warning"]
            if not 200 <= response.status < 300:
                raise _error(response.status, response.reason, raw)
            return bytes(raw)
        raise AssertionError("unreachable")  # pragma: no cover

    def stream_lines(self, path: str, query: Sequence[tuple[str, str]] = ()) -> Iterator[str]:
        conn = self._open(None)
        try:
            try:
                conn.request("GET", self._url(path, query), headers=self._headers(None))
                response = conn.getresponse()
            except (OSError, ssl.SSLError) as error:
                raise self._unreachable(error) from None
            if not 200 <= response.status < 300:
                raise _error(response.status, response.reason, response.read())
            while True:
                try:
                    line = response.readline()
                except (OSError, ssl.SSLError) as error:
                    raise self._unreachable(error) from None
                if not line:
                    return
                yield line.decode("utf-8", "replace").rstrip("\r\n")
        finally:
            conn.close()

    def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        self._close()


def connect(kubeconfig: str | None = None, context: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> HttpApi:
    """An :class:`HttpApi` for a kubeconfig's context; :class:`ConfigError` when it cannot be used."""
    return HttpApi(load_connection(kubeconfig, context), timeout)
