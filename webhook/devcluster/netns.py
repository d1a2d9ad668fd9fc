"""Run a program in a network namespace of its own that still reaches the dev cluster's API server.

Argo's workflow-controller listens on fixed ports of every interface (``:6060`` for its health check, ``:9090``
for metrics) that the dev cluster must not take on the host. Run in a network namespace of its own
(``unshare -n``; ``unshare -rn`` for a user who is not root), it has a loopback of its own and can take them;
the API server is reached through a Unix socket, which crosses network namespaces because it is a file:

* ``host``: on the host, accept on the Unix socket and connect each stream to ``127.0.0.1:PORT`` (the API
  server);
* ``inside``: in the new namespace, bring the loopback up, accept on ``127.0.0.1:PORT`` there and connect each
  stream to the Unix socket; then run the program, and exit with it.

TLS passes through untouched, so the program's kubeconfig (``https://127.0.0.1:PORT``, the dev CA) is the same
as on the host. Loopback and a file only: nothing listens on a host interface.

    python -m webhook.devcluster.netns host --socket S --port P
    unshare -n python -m webhook.devcluster.netns inside --socket S --port P -- PROGRAM ARGS...
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

CHUNK = 65536
STOP_GRACE = 5.0
"""Seconds the program has to stop after SIGTERM before it is killed (the dev cluster's stop waits 10)."""


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.close()


async def _splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: asyncio.Future[
        tuple[asyncio.StreamReader, asyncio.StreamWriter]]) -> None:
    try:
        far_reader, far_writer = await peer
    except OSError:
        writer.close()
        return
    await asyncio.gather(_pump(reader, far_writer), _pump(far_reader, writer))


async def host(socket_path: Path, port: int) -> None:
    """Unix socket -> 127.0.0.1:port, until killed."""
    socket_path.unlink(missing_ok=True)

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _splice(reader, writer, asyncio.ensure_future(asyncio.open_connection("127.0.0.1", port)))

    server = await asyncio.start_unix_server(accepted, path=str(socket_path))
    socket_path.chmod(0o600)
    async with server:
        await server.serve_forever()


async def inside(socket_path: Path, port: int, argv: Sequence[str]) -> int:
    """127.0.0.1:port -> Unix socket in this (new) network namespace, while ``argv`` runs; its exit code."""
    ip = shutil.which("ip") or "/usr/sbin/ip"
    subprocess.run([ip, "link", "set", "lo", "up"], check=True)

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _splice(reader, writer, asyncio.ensure_future(asyncio.open_unix_connection(str(socket_path))))

    server = await asyncio.start_server(accepted, "127.0.0.1", port)
    async with server:
        child = await asyncio.create_subprocess_exec(*argv)
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):  # stopped: stop the program too, never leave it behind
            loop.add_signal_handler(sig, stopping.set)
        waiting = asyncio.ensure_future(child.wait())
        stop = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({waiting, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            with contextlib.suppress(ProcessLookupError):
                child.terminate()
            try:
                await asyncio.wait_for(asyncio.shield(waiting), STOP_GRACE)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    child.kill()
                await waiting
        stop.cancel()
        return child.returncode if child.returncode is not None else 1


def unshare_prefix() -> tuple[str, ...]:
    """``unshare -n`` (root) or ``unshare -rn`` (a user namespace, for anyone else)."""
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    return (unshare, "-n") if os.geteuid() == 0 else (unshare, "-rn")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webhook.devcluster.netns", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("side", choices=("host", "inside"))
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--port", required=True, type=int)
    given = list(sys.argv[1:] if argv is None else argv)
    split = given.index("--") if "--" in given else len(given)
    args = parser.parse_args(given[:split])
    program = given[split + 1:]
    if args.side == "host":
        asyncio.run(host(args.socket, args.port))
        return 0
    if not program:
        parser.error("inside: give the program to run after --")
    return asyncio.run(inside(args.socket, args.port, program))


if __name__ == "__main__":
    sys.exit(main())
