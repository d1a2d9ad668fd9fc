"""Stopping a dev-cluster process waits until it has exited, not only until it looks gone."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from webhook.devcluster import processes

LINGERS = """
import os, signal, sys, time
def linger(*_):  # on SIGTERM: drop the command line that names the cluster, then take a while to exit
    os.execv("/bin/sleep", ["sleep", "1"])
signal.signal(signal.SIGTERM, linger)
print("ready", flush=True)
time.sleep(60)
"""


def test_a_process_that_lingers_after_it_looks_gone_is_waited_for(tmp_path: Path) -> None:
    marker = str(tmp_path)
    component = processes.Component("lingers", (sys.executable, "-c", LINGERS, marker))
    pid = processes.start(component, tmp_path / "run", tmp_path / "logs")
    log = tmp_path / "logs" / "lingers.log"
    deadline = time.monotonic() + 30
    while "ready" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert processes.running_pid(tmp_path / "run", "lingers", marker) == pid
    assert processes.stop(tmp_path / "run", "lingers", marker)
    assert not Path(f"/proc/{pid}").exists()  # exited and reaped: nothing of it outlives the stop
    assert not processes.pid_file(tmp_path / "run", "lingers").exists()
