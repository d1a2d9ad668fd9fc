"""Who the console acts as for each request: the person using it, never the console itself.

In order, the first that applies:

1. an authenticating proxy's header carrying the user's own bearer token (``--token-header``);
2. an authenticating proxy's header naming the user (``--user-header``): requests go with the console's
   kubeconfig credentials plus ``Impersonate-User``, so the operator must grant that identity ``impersonate``
   on users (the shipped ServiceAccount has no such right: this mode is opt-in);
3. a bearer token the user pasted once, kept in this process's memory only, under a random cookie value
   (never logged, never written to disk; gone when the process stops or after :data:`SESSION_LIFETIME`);
4. the kubeconfig's own credentials (``--act-as-kubeconfig``): the dev cluster on loopback only.

Otherwise there is no identity and the user is asked for a token.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from webhook.readmodel.kubeapi import HttpApi, KubeApi
from webhook.readmodel.kubeconfig import Connection, Credentials

SESSION_COOKIE = "kq_console_session"
SESSION_LIFETIME = 8 * 3600.0
"""Seconds a pasted token is kept after its last use."""
MAX_TOKEN_LENGTH = 16384
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=:")


class TokenError(ValueError):
    """A pasted token that cannot be one (the message says why, without repeating the token)."""


def clean_token(text: str) -> str:
    """The token in ``text`` (surrounding blanks and a ``Bearer`` prefix removed); :class:`TokenError` when it
    is empty, too long or holds characters no bearer token has (RFC 6750 ``b64token``)."""
    token = text.strip()
    if token.lower().startswith("bearer "):
        token = token[7:].strip()
    if not token:
        raise TokenError("paste a bearer token: the field is empty")
    if len(token) > MAX_TOKEN_LENGTH:
        raise TokenError(f"that is not a bearer token: it is longer than {MAX_TOKEN_LENGTH} characters")
    bad = sorted({ch for ch in token if ch not in _TOKEN_CHARS})
    if bad:
        shown = ", ".join("space" if ch == " " else repr(ch) for ch in bad[:3])
        raise TokenError(f"that is not a bearer token: it holds characters a token cannot have ({shown})")
    return token


@dataclass
class Sessions:
    """Pasted tokens by session key, in memory only."""

    clock: Callable[[], float] = time.monotonic
    lifetime: float = SESSION_LIFETIME
    _tokens: dict[str, tuple[str, str, float]] = field(default_factory=dict)

    def open(self, token: str, user: str = "") -> str:
        """Keep ``token`` (and the user name the cluster gave it); the new random session key for the cookie."""
        self._expire()
        key = secrets.token_urlsafe(32)
        self._tokens[key] = (token, user, self.clock())
        return key

    def token(self, key: str | None) -> str | None:
        """The token of a live session (its lifetime starts again), else ``None``."""
        self._expire()
        if not key or key not in self._tokens:
            return None
        token, user, _ = self._tokens[key]
        self._tokens[key] = (token, user, self.clock())
        return token

    def user(self, key: str | None) -> str:
        """The user name of a live session ("" when unknown)."""
        found = self._tokens.get(key or "")
        return found[1] if found else ""

    def close(self, key: str | None) -> None:
        if key:
            self._tokens.pop(key, None)

    def _expire(self) -> None:
        now = self.clock()
        for key in [k for k, (_, _, used) in self._tokens.items() if now - used > self.lifetime]:
            del self._tokens[key]

    def __len__(self) -> int:
        return len(self._tokens)


@dataclass(frozen=True, slots=True)
class IdentitySettings:
    """How the console finds who it acts as (see the module notes)."""

    cluster: Connection
    """Where the API server is (and the kubeconfig's credentials, used only by modes 2 and 4)."""
    act_as_kubeconfig: bool = False
    token_header: str | None = None
    user_header: str | None = None


@dataclass(frozen=True, slots=True)
class Identity:
    """The credentials of one request."""

    how: str
    """``token`` (pasted), ``proxy-token``, ``proxy-user`` or ``kubeconfig``."""
    credentials: Credentials
    impersonate: str | None = None
    user: str = ""
    """Who the cluster says this is, when known (shown on the pages)."""

    @property
    def can_log_out(self) -> bool:
        return self.how == "token"

    def __repr__(self) -> str:  # never show a token, whatever prints this object
        return f"Identity(how={self.how!r}, impersonate={self.impersonate!r})"


def identify(settings: IdentitySettings, sessions: Sessions, headers: Mapping[str, str],
             session_key: str | None) -> Identity:
    """The identity of a request (module notes); :class:`NoIdentity` when there is none."""
    if settings.token_header:
        given = headers.get(settings.token_header)
        if given:
            try:
                return Identity("proxy-token", Credentials(token=clean_token(given)))
            except TokenError as error:
                raise NoIdentity(f"the proxy's {settings.token_header} header holds no usable token: {error}") from None
    if settings.user_header:
        user = (headers.get(settings.user_header) or "").strip()
        if user:
            return Identity("proxy-user", settings.cluster.credentials, impersonate=user, user=user)
    token = sessions.token(session_key)
    if token is not None:
        return Identity("token", Credentials(token=token), user=sessions.user(session_key))
    if settings.act_as_kubeconfig:
        return Identity("kubeconfig", settings.cluster.credentials)
    if settings.token_header or settings.user_header:
        names = " or ".join(h for h in (settings.token_header, settings.user_header) if h)
        raise NoIdentity(f"the authenticating proxy sent no {names} header, and no token was pasted")
    raise NoIdentity("sign in with your bearer token")


class NoIdentity(Exception):
    """The request carries no identity the console may act as (the message says what is missing)."""


class ImpersonatingApi(HttpApi):
    """:class:`HttpApi` that asks the API server to act as another user (``Impersonate-User``)."""

    def __init__(self, connection: Connection, user: str) -> None:
        super().__init__(connection)
        self.user = user

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = super()._headers(content_type)
        headers["Impersonate-User"] = self.user
        return headers


def http_api_for(settings: IdentitySettings, identity: Identity) -> KubeApi:
    """A fresh API client with the identity's credentials (and nothing else of the kubeconfig's)."""
    connection = replace(settings.cluster, credentials=identity.credentials)
    if identity.impersonate:
        return ImpersonatingApi(connection, identity.impersonate)
    api = HttpApi(connection)
    api.namespace = settings.cluster.namespace
    return api
