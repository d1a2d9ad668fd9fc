"""``kq certs``: a CA and a serving certificate for the webhook, as PEM files.

    kq certs --out certs/ --dns kube-queue-webhook.kube-queue.svc --ip 127.0.0.1

writes ``ca.crt``, ``ca.key``, ``tls.crt`` and ``tls.key`` (keys mode 0600). An existing CA in the
directory is reused, so a webhook configuration that trusts it (``caBundle``) stays valid when the serving
certificate is re-issued; ``--new-ca`` replaces it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from webhook import pki
from webhook.admission.configs import SERVICE_NAME, SERVICE_NAMESPACE
from webhook.cli.args import Subparsers
from webhook.kube.selfcert import service_dns_names
from webhook.readmodel.commandline import command_parser

DEFAULT_IPS = ("127.0.0.1",)


def register(subparsers: Subparsers) -> None:
    parser = command_parser(
        subparsers,
        "certs",
        "Write ca.crt, ca.key, tls.crt and tls.key into --out. The serving certificate names the in-cluster "
        f"Service ({SERVICE_NAME}.{SERVICE_NAMESPACE}.svc and its short forms), localhost, every --dns and "
        "every --ip (127.0.0.1 by default).",
        ["kq certs --out certs/ --ip 127.0.0.1", "kq serve --cert certs/tls.crt --key certs/tls.key"],
        heading="example",
        wrap=False,
    )
    parser.add_argument("--out", type=Path, default=Path("certs"), help="directory to write into (default: certs/)")
    parser.add_argument("--dns", action="append", default=[], metavar="NAME", help="extra DNS name (repeatable)")
    parser.add_argument(
        "--ip", action="append", default=None, metavar="ADDRESS", help="IP address SAN (repeatable; default 127.0.0.1)"
    )
    parser.add_argument("--days", type=int, default=365, help="validity of the serving certificate (default: 365)")
    parser.add_argument("--new-ca", action="store_true", help="make a new CA even if --out holds one")
    parser.set_defaults(handler=run)


def _write(path: Path, data: bytes, secret: bool) -> None:
    if secret:
        path.touch(mode=0o600, exist_ok=True)
        path.chmod(0o600)
    path.write_bytes(data)


def write_certs(
    out: Path, dns_names: list[str], ip_addresses: list[str], *, days: int = 365, new_ca: bool = False
) -> dict[str, Path]:
    """Write the four files; returns them by name. Reuses ``ca.crt``/``ca.key`` when both exist."""
    out.mkdir(parents=True, exist_ok=True)
    ca_crt, ca_key = out / "ca.crt", out / "ca.key"
    if not new_ca and ca_crt.is_file() and ca_key.is_file():
        ca_cert_pem, ca_key_pem = ca_crt.read_bytes(), ca_key.read_bytes()
    else:
        ca_cert_pem, ca_key_pem = pki.make_ca("kube-queue-webhook-ca")
        _write(ca_key, ca_key_pem, True)
        _write(ca_crt, ca_cert_pem, False)
    names = list(dict.fromkeys([*service_dns_names(SERVICE_NAME, SERVICE_NAMESPACE), "localhost", *dns_names]))
    cert_pem, key_pem = pki.issue_cert(
        ca_cert_pem,
        ca_key_pem,
        names[0],
        dns_names=names,
        ip_addresses=list(dict.fromkeys(ip_addresses)),
        days=days,
    )
    _write(out / "tls.key", key_pem, True)
    _write(out / "tls.crt", cert_pem, False)
    return {"ca.crt": ca_crt, "ca.key": ca_key, "tls.crt": out / "tls.crt", "tls.key": out / "tls.key"}


def run(args: argparse.Namespace) -> int:
    ips = args.ip if args.ip is not None else list(DEFAULT_IPS)
    try:
        written = write_certs(args.out, args.dns, ips, days=args.days, new_ca=args.new_ca)
    except ValueError as error:
        raise SystemExit(f"kq certs: {error}") from None
    for name, path in written.items():
        print(f"wrote {path}" if name != "ca.key" else f"wrote {path} (keep it private)")
    print(f"serve with: kq serve --cert {written['tls.crt']} --key {written['tls.key']}")
    return 0
