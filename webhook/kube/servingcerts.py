"""A serving certificate with the CA that signed it, as PEM bytes: what a webhook's TLS Secret holds.

Its own module, with the standard library only, so that what makes one (``kq serve``'s self-issued
certificate, the dev cluster's operator certificates) need not import the API client.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

SECRET_KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key")
"""The Secret's keys (and the files' names) for the CA certificate and key, the serving certificate and key."""


@dataclass(frozen=True, slots=True)
class ServingCerts:
    """PEM bytes: the CA certificate and key, the serving certificate and key."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    def secret_data(self) -> dict[str, str]:
        """A Secret's ``data``: each part under its key (:data:`SECRET_KEYS`), base64-encoded."""
        parts = (self.ca_cert, self.ca_key, self.cert, self.key)
        return {key: base64.b64encode(value).decode("ascii") for key, value in zip(SECRET_KEYS, parts, strict=True)}
