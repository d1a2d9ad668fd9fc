"""Synchronous Kubernetes API access for the developer commands (``kq list``, ``kq why``, ``kq logs``...).

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
import os
import ssl
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from webhook.api import kinds
from webhook.api.kinds import Kind

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_TIMEOUT = 30.0


class ApiError(Exception):
    """A refused or failed request: ``status`` is the HTTP status (0 when the server was not reached)."""

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """``the server refused: <message> (403 Forbidden)`` on one line."""
        text = " ".join((self.message or self.reason or "error").split())
        if self.status == 0:
            return text
        return f"{text} ({self.status} {self.reason})" if self.reason and self.reason not in text else text

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def forbidden(self) -> bool:
        return self.status in (401, 403)


class ConfigError(Exception):
    """A kubeconfig that cannot be used (missing, unreadable, unknown context...)."""


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
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


JOBS = Ref.of(kinds.JOB)
PODS = Ref.of(kinds.POD)
EVENTS = Ref.of(kinds.EVENT)
NODES = Ref.of(kinds.NODE)
NAMESPACES = Ref.of(kinds.NAMESPACE)
PRIORITY_CLASSES = Ref.of(kinds.PRIORITY_CLASS)
TREES = Ref.of(kinds.ELASTIC_QUOTA_TREE)
QUEUES = Ref.of(kinds.QUEUE)


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
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """One request; the decoded JSON answer (``{}`` when empty). :class:`ApiError` unless 2xx."""
        raise NotImplementedError

    def stream_lines(self, path: str, query: Sequence[tuple[str, str]] = ()) -> Iterator[str]:
        """A streamed GET (``follow=true`` logs, watches): its lines, as they come, without line ends."""
        raise NotImplementedError

    def text(self, path: str, query: Sequence[tuple[str, str]] = ()) -> str:
        """A GET whose answer is plain text (logs)."""
        return "".join(line + "\n" for line in self.stream_lines(path, query))

    # Helpers ------------------------------------------------------------------------------------------------
    def get(self, ref: Ref, name: str, namespace: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", ref.path(namespace, name))
        return result

    def list(
        self,
        ref: Ref,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        """Every object of a collection (pages of 500 followed to the end)."""
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            query = [("limit", "500")]
            if token:
                query.append(("continue", token))
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            page = self.request("GET", ref.path(namespace), query)
            items.extend(item for item in page.get("items") or () if isinstance(item, dict))
            token = str((page.get("metadata") or {}).get("continue") or "")
            if not token:
                return items

    def create(self, ref: Ref, body: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", ref.path(namespace), body=dict(body))
        return result

    def delete(self, ref: Ref, name: str, namespace: str | None = None) -> dict[str, Any]:
        """Delete with background propagation (a job's pods go too)."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        result: dict[str, Any] = self.request("DELETE", ref.path(namespace, name), body=body)
        return result


def _error(status: int, reason: str, raw: bytes) -> ApiError:
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        return ApiError(status, reason, raw[:300].decode("utf-8", "replace").strip())
    if not isinstance(body, dict):
        return ApiError(status, reason, str(body)[:300])
    return ApiError(status, str(body.get("reason") or reason), str(body.get("message") or ""))


# Kubeconfig ---------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Credentials:
    """How to authenticate: a bearer token, basic auth, and/or a client certificate (PEM bytes)."""

    token: str | None = None
    basic: tuple[str, str] | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None


@dataclass(slots=True)
class Connection:
    """Where the API server is and how to talk to it."""

    server: str
    namespace: str = "default"
    context: str = ""
    ca_pem: bytes | None = None
    insecure: bool = False
    credentials: Credentials = field(default_factory=Credentials)


def _yaml_problem(error: Exception) -> str:
    """A YAML parser error on one line: what is wrong and where (``line 3, column 5: ...``)."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}"


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read kubeconfig {path}: {error.strerror or error}") from None
    try:
        doc: Any = json.loads(text)  # kubeconfigs written by `kq dev` are JSON: no YAML parser needed
    except ValueError:
        import yaml  # noqa: PLC0415 - only for YAML kubeconfigs

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ConfigError(f"kubeconfig {path} is not valid YAML: {_yaml_problem(error)}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"kubeconfig {path} is not a kubeconfig (expected a mapping)")
    return doc


def _merge(docs: Sequence[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """Merge kubeconfig files like kubectl: the first file that sets a value (or names an entry) wins."""
    merged: dict[str, Any] = {"clusters": {}, "users": {}, "contexts": {}, "current-context": ""}
    for path, doc in docs:
        if not merged["current-context"] and doc.get("current-context"):
            merged["current-context"] = str(doc["current-context"])
        for section, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in doc.get(section) or ():
                if not isinstance(entry, dict) or not entry.get("name"):
                    continue
                value = entry.get(inner) or {}
                if isinstance(value, dict):
                    merged[section].setdefault(str(entry["name"]), (path.parent, value))
    return merged


def _file_bytes(base: Path, entry: Mapping[str, Any], data_key: str, file_key: str) -> bytes | None:
    data = entry.get(data_key)
    if data:
        try:
            return base64.b64decode(str(data))
        except ValueError:
            raise ConfigError(f"kubeconfig: {data_key} is not base64") from None
    name = entry.get(file_key)
    if not name:
        return None
    path = Path(str(name)).expanduser()
    if not path.is_absolute():
        path = base / path
    try:
        return path.read_bytes()
    except OSError as error:
        raise ConfigError(f"kubeconfig: cannot read {file_key} {path}: {error.strerror or error}") from None


def _exec_credentials(spec: Mapping[str, Any]) -> Credentials:
    command = spec.get("command")
    if not command:
        raise ConfigError("kubeconfig: the user's exec plugin names no command")
    env = dict(os.environ)
    for item in spec.get("env") or ():
        if isinstance(item, dict) and item.get("name"):
            env[str(item["name"])] = str(item.get("value") or "")
    api_version = str(spec.get("apiVersion") or "client.authentication.k8s.io/v1")
    env["KUBERNETES_EXEC_INFO"] = json.dumps(
        {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    )
    argv = [str(command), *(str(arg) for arg in spec.get("args") or ())]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ConfigError(f"kubeconfig: the exec credential plugin {command} failed: {error}") from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise ConfigError(f"kubeconfig: the exec credential plugin {command} failed: {last}")
    try:
        status = json.loads(result.stdout).get("status") or {}
    except (ValueError, AttributeError):
        raise ConfigError(f"kubeconfig: the exec credential plugin {command} printed no ExecCredential") from None
    cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
    return Credentials(
        token=status.get("token") or None,
        cert_pem=cert.encode() if cert else None,
        key_pem=key.encode() if key else None,
    )


def _user_credentials(base: Path, user: Mapping[str, Any]) -> Credentials:
    if user.get("auth-provider"):
        name = (user.get("auth-provider") or {}).get("name", "?")
        raise ConfigError(f"kubeconfig: auth-provider {name!r} is not supported by kq; use an exec plugin or a token")
    if isinstance(user.get("exec"), dict):
        return _exec_credentials(user["exec"])
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token_bytes = _file_bytes(base, user, "-", "tokenFile")
        token = token_bytes.decode().strip() if token_bytes else None
    basic = None
    if user.get("username"):
        basic = (str(user["username"]), str(user.get("password") or ""))
    return Credentials(
        token=str(token) if token else None,
        basic=basic,
        cert_pem=_file_bytes(base, user, "client-certificate-data", "client-certificate"),
        key_pem=_file_bytes(base, user, "client-key-data", "client-key"),
    )


def _in_cluster() -> Connection | None:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    token_path = SERVICE_ACCOUNT / "token"
    if not host or not token_path.is_file():
        return None
    namespace_path = SERVICE_ACCOUNT / "namespace"
    namespace = namespace_path.read_text().strip() if namespace_path.is_file() else "default"
    ca_path = SERVICE_ACCOUNT / "ca.crt"
    return Connection(
        server=f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}",
        namespace=namespace or "default",
        context="in-cluster",
        ca_pem=ca_path.read_bytes() if ca_path.is_file() else None,
        credentials=Credentials(token=token_path.read_text().strip()),
    )


def kubeconfig_paths(explicit: str | None = None, env: Mapping[str, str] | None = None) -> list[Path]:
    """The kubeconfig files in effect: ``--kubeconfig``, else ``$KUBECONFIG``'s, else ``~/.kube/config``."""
    if explicit:
        return [Path(explicit).expanduser()]
    environ = os.environ if env is None else env
    listed = [Path(p).expanduser() for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return listed
    return [Path("~/.kube/config").expanduser()]


def load_connection(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    """The connection of a kubeconfig's context (see the module notes); :class:`ConfigError` otherwise."""
    paths = kubeconfig_paths(kubeconfig)
    existing = [path for path in paths if path.is_file()]
    if kubeconfig and not existing:
        raise ConfigError(f"kubeconfig {kubeconfig} does not exist")
    if not existing:
        in_cluster = _in_cluster()
        if in_cluster is not None and not context:
            return in_cluster
        where = ", ".join(str(path) for path in paths)
        raise ConfigError(
            f"no kubeconfig found ({where}); pass --kubeconfig, set KUBECONFIG, or run `eval \"$(kq dev env)\"` "
            "for the dev cluster"
        )
    merged = _merge([(path, _read_config_file(path)) for path in existing])
    name = context or merged["current-context"]
    if not name:
        raise ConfigError("the kubeconfig has no current context; pass --context NAME")
    if name not in merged["contexts"]:
        known = ", ".join(sorted(merged["contexts"])) or "none"
        raise ConfigError(f"context {name!r} is not in the kubeconfig (contexts: {known})")
    _, ctx = merged["contexts"][name]
    cluster_name, user_name = str(ctx.get("cluster") or ""), str(ctx.get("user") or "")
    if cluster_name not in merged["clusters"]:
        raise ConfigError(f"context {name!r} names cluster {cluster_name!r}, which the kubeconfig does not define")
    base, cluster = merged["clusters"][cluster_name]
    server = str(cluster.get("server") or "")
    if not server:
        raise ConfigError(f"cluster {cluster_name!r} of the kubeconfig has no server")
    credentials = Credentials()
    if user_name:
        if user_name not in merged["users"]:
            raise ConfigError(f"context {name!r} names user {user_name!r}, which the kubeconfig does not define")
        user_base, user = merged["users"][user_name]
        credentials = _user_credentials(user_base, user)
    return Connection(
        server=server.rstrip("/"),
        namespace=str(ctx.get("namespace") or "default"),
        context=name,
        ca_pem=_file_bytes(base, cluster, "certificate-authority-data", "certificate-authority"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        credentials=credentials,
    )


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
        self._conn: Any = None
        self._down: ApiError | None = None
        """Set once the server could not be reached: later requests fail at once instead of waiting again."""
        self.warnings: list[str] = []
        """``Warning`` headers of the last answer (admission webhooks' warnings, deprecations)."""

    def _open(self, timeout: float | None) -> Any:
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
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        if self._down is not None:
            raise self._down
        payload = None if body is None else json.dumps(body).encode()
        url = self._url(path, query)
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = self._open(self.timeout)
            try:
                self._conn.request(method, url, body=payload, headers=self._headers(content_type if payload else None))
                response = self._conn.getresponse()
                raw = response.read()
            except (ConnectionResetError, BrokenPipeError) as error:
                # A kept-alive connection the server closed: retry once on a new one.
                self._close()
                if attempt == 2:
                    raise self._unreachable(error) from None
                continue
            except (OSError, ssl.SSLError) as error:
                self._close()
                raise self._unreachable(error) from None
            except Exception as error:  # http.client.HTTPException and friends
                self._close()
                raise self._unreachable(error) from None
            self.warnings = [value for key, value in response.getheaders() if key.lower() == "warning"]
            if not 200 <= response.status < 300:
                raise _error(response.status, response.reason, raw)
            if not raw:
                return {}
            try:
                return json.loads(raw)
            except ValueError:
                return {"text": raw.decode("utf-8", "replace")}
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
