"""Benchmark of the mutating webhook over HTTPS on loopback (a report, not a test: it asserts nothing).

    .venv/bin/python bench/webhook_bench.py [--rate 500] [--seconds 10] [--concurrency 64]

1. the handler alone (``respond``: decode, decide, patch, encode) in-process, for reference;
2. the service (``make_app`` with the seed's tree, TLS from ``kq certs``) in a child process, driven by a
   concurrent aiohttp client at a fixed arrival rate (open loop: latency counts from each request's planned
   send time, so a stalled server cannot hide its queueing);
3. the same client unpaced (closed loop) for the highest throughput.

Goal (issue 4): p99 under 5 ms at 500 requests/s. Numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiohttp import web

from tests.builders import seed_tree
from webhook.admission.app import make_app, respond
from webhook.admission.state import AdmissionState, Settings, StateStore
from webhook.cli.certs import write_certs


def seed_job_review(index: int) -> bytes:
    """The seed's Job (6 pods x 10 CPU / 10Gi, suspend: false) created in user-a, as the apiserver sends it."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"pi-{index}", "namespace": "user-a", "labels": {"app": "pi"}},
        "spec": {
            "suspend": False,
            "parallelism": 6,
            "completions": 6,
            "template": {
                "metadata": {"labels": {"app": "pi"}},
                "spec": {
                    "containers": [
                        {
                            "name": "pi",
                            "image": "perl:5.34.0",
                            "command": ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"],
                            "resources": {"requests": {"cpu": "10", "memory": "10Gi"}},
                        }
                    ],
                    "restartPolicy": "Never",
                },
            },
        },
    }
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"bench-{index}",
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "name": f"pi-{index}",
            "namespace": "user-a",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": job,
            "oldObject": None,
            "dryRun": False,
        },
    }
    return orjson.dumps(review)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


def report(name: str, latencies: list[float], elapsed: float, errors: int) -> None:
    ms = [x * 1000 for x in latencies]
    print(
        f"{name:<34} n={len(ms):>6}  throughput={len(ms) / elapsed:8.1f}/s  "
        f"p50={percentile(ms, 0.50):6.2f} ms  p99={percentile(ms, 0.99):6.2f} ms  "
        f"max={max(ms) if ms else float('nan'):6.2f} ms  errors={errors}"
    )


def bench_handler(count: int) -> None:
    state, settings = AdmissionState(tree=seed_tree()), Settings()
    bodies = [seed_job_review(i) for i in range(count)]
    latencies = []
    started = time.perf_counter()
    for body in bodies:
        t0 = time.perf_counter()
        status, _ = respond("mutate", body, state, settings)
        latencies.append(time.perf_counter() - t0)
        assert status == 200
    report("handler only (in-process)", latencies, time.perf_counter() - started, 0)


def serve_forever(port: int, cert: str, key: str) -> None:
    """The child process: the real app on loopback with TLS."""
    import logging  # noqa: PLC0415

    logging.basicConfig(level=logging.WARNING)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    app = make_app(StateStore(AdmissionState(tree=seed_tree()), ready=True), Settings())
    web.run_app(app, host="127.0.0.1", port=port, ssl_context=context, access_log=None, print=None)


async def wait_up(url: str, context: ssl.SSLContext) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            try:
                async with session.get(url + "/readyz", ssl=context) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise SystemExit("the service did not come up")


async def drive(
    url: str, context: ssl.SSLContext, *, rate: float | None, total: int, concurrency: int
) -> tuple[list[float], float, int]:
    """Send ``total`` requests (at ``rate``/s, or as fast as ``concurrency`` allows when ``None``)."""
    bodies = [seed_job_review(i) for i in range(total)]
    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=context)
    gate = asyncio.Semaphore(concurrency)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector) as session:
        # Warm the connection pool and TLS sessions.
        await asyncio.gather(
            *(session.post(url + "/mutate", data=bodies[0], headers=headers) for _ in range(concurrency))
        )
        loop = asyncio.get_running_loop()
        start = loop.time()

        async def one(index: int) -> None:
            nonlocal errors
            planned = start + index / rate if rate else None
            if planned is not None:
                delay = planned - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            async with gate:
                sent = planned if planned is not None else loop.time()
                try:
                    async with session.post(url + "/mutate", data=bodies[index], headers=headers) as resp:
                        await resp.read()
                        if resp.status != 200:
                            errors += 1
                except aiohttp.ClientError:
                    errors += 1
                latencies.append(loop.time() - sent)

        await asyncio.gather(*(one(i) for i in range(total)))
        elapsed = loop.time() - start
    return latencies, elapsed, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=500.0, help="target requests per second (default 500)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the paced run (default 10)")
    parser.add_argument("--concurrency", type=int, default=64, help="client connections (default 64)")
    args = parser.parse_args()

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    bench_handler(5000)

    with tempfile.TemporaryDirectory() as tmp:
        files = write_certs(Path(tmp), [], ["127.0.0.1"])
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = multiprocessing.get_context("spawn").Process(
            target=serve_forever, args=(port, str(files["tls.crt"]), str(files["tls.key"])), daemon=True
        )
        server.start()
        try:
            url = f"https://127.0.0.1:{port}"
            context = ssl.create_default_context(cafile=str(files["ca.crt"]))
            asyncio.run(wait_up(url, context))
            total = int(args.rate * args.seconds)
            result: Any = asyncio.run(drive(url, context, rate=args.rate, total=total, concurrency=args.concurrency))
            report(f"HTTPS paced at {args.rate:.0f}/s", *result)
            result = asyncio.run(drive(url, context, rate=None, total=total, concurrency=args.concurrency))
            report("HTTPS unpaced (max throughput)", *result)
        finally:
            server.terminate()
            server.join(timeout=10)


if __name__ == "__main__":
    main()
