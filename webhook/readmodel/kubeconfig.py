"""Where ``kq`` connects: the kubeconfig files (``--kubeconfig``, ``$KUBECONFIG`` merged in order, or
``~/.kube/config``), their context, cluster and user (certificates, tokens, token files, exec plugins), or the
pod's ServiceAccount when ``kq`` runs in a cluster. Errors say which file and which entry is wrong."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from webhook.api.objects import Obj, mapping, mappings, text

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ConfigError(Exception):
    """A kubeconfig that cannot be used (missing, unreadable, unknown context...)."""


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


Entry = tuple[Path, Obj]
"""A cluster, user or context of a kubeconfig, with the directory of its file (its relative paths are
relative to it)."""


@dataclass(slots=True)
class Merged:
    """The kubeconfig files in effect as one: the current context, and each entry by name."""

    current_context: str = ""
    clusters: dict[str, Entry] = field(default_factory=dict)
    users: dict[str, Entry] = field(default_factory=dict)
    contexts: dict[str, Entry] = field(default_factory=dict)


def _yaml_problem(error: Exception) -> str:
    """A YAML parser error on one line: what is wrong and where (``line 3, column 5: ...``)."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}"


def _read_config_file(path: Path) -> Obj:
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read kubeconfig {path}: {error.strerror or error}") from None
    try:
        doc: object = json.loads(text)  # kubeconfigs written by `kq dev` are JSON: no YAML parser needed
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


def _merge(docs: Sequence[tuple[Path, Obj]]) -> Merged:
    """Merge kubeconfig files like kubectl: the first file that sets a value (or names an entry) wins."""
    merged = Merged()
    sections = (("clusters", "cluster", merged.clusters), ("users", "user", merged.users),
                ("contexts", "context", merged.contexts))
    for path, doc in docs:
        if not merged.current_context and doc.get("current-context"):
            merged.current_context = str(doc["current-context"])
        for section, inner, entries in sections:
            for entry in mappings(doc.get(section)):
                if not entry.get("name"):
                    continue
                value = entry.get(inner) or {}
                if isinstance(value, dict):
                    entries.setdefault(str(entry["name"]), (path.parent, value))
    return merged


def _file_bytes(base: Path, entry: Obj, data_key: str, file_key: str) -> bytes | None:
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


def _exec_credentials(spec: Obj) -> Credentials:
    command = spec.get("command")
    if not command:
        raise ConfigError("kubeconfig: the user's exec plugin names no command")
    env = dict(os.environ)
    for item in mappings(spec.get("env")):
        if item.get("name"):
            env[str(item["name"])] = str(item.get("value") or "")
    api_version = str(spec.get("apiVersion") or "client.authentication.k8s.io/v1")
    env["KUBERNETES_EXEC_INFO"] = json.dumps(
        {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    )
    args = spec.get("args")
    argv = [str(command), *(str(arg) for arg in (args if isinstance(args, list) else ()))]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ConfigError(f"kubeconfig: the exec credential plugin {command} failed: {error}") from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise ConfigError(f"kubeconfig: the exec credential plugin {command} failed: {last}")
    try:
        printed: object = json.loads(result.stdout)
    except ValueError:
        printed = None
    if not isinstance(printed, dict):
        raise ConfigError(f"kubeconfig: the exec credential plugin {command} printed no ExecCredential")
    status = mapping(printed.get("status"))
    token = status.get("token")
    cert, key = text(status.get("clientCertificateData")), text(status.get("clientKeyData"))
    return Credentials(
        token=str(token) if token else None,
        cert_pem=cert.encode() if cert else None,
        key_pem=key.encode() if key else None,
    )


def _user_credentials(base: Path, user: Obj) -> Credentials:
    if user.get("auth-provider"):
        name = mapping(user.get("auth-provider")).get("name", "?")
        raise ConfigError(f"kubeconfig: auth-provider {name!r} is not supported by kq; use an exec plugin or a token")
    plugin = user.get("exec")
    if isinstance(plugin, dict):
        return _exec_credentials(plugin)
    token: object = user.get("token")
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
    name = context or merged.current_context
    if not name:
        raise ConfigError("the kubeconfig has no current context; pass --context NAME")
    if name not in merged.contexts:
        known = ", ".join(sorted(merged.contexts)) or "none"
        raise ConfigError(f"context {name!r} is not in the kubeconfig (contexts: {known})")
    _, ctx = merged.contexts[name]
    cluster_name, user_name = str(ctx.get("cluster") or ""), str(ctx.get("user") or "")
    if cluster_name not in merged.clusters:
        raise ConfigError(f"context {name!r} names cluster {cluster_name!r}, which the kubeconfig does not define")
    base, cluster = merged.clusters[cluster_name]
    server = str(cluster.get("server") or "")
    if not server:
        raise ConfigError(f"cluster {cluster_name!r} of the kubeconfig has no server")
    credentials = Credentials()
    if user_name:
        if user_name not in merged.users:
            raise ConfigError(f"context {name!r} names user {user_name!r}, which the kubeconfig does not define")
        user_base, user = merged.users[user_name]
        credentials = _user_credentials(user_base, user)
    return Connection(
        server=server.rstrip("/"),
        namespace=str(ctx.get("namespace") or "default"),
        context=name,
        ca_pem=_file_bytes(base, cluster, "certificate-authority-data", "certificate-authority"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        credentials=credentials,
    )
