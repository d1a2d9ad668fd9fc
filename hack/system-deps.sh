#!/usr/bin/env bash
# System packages the tests need beyond Python and Go (Debian's packages), each installed only when missing:
# * Prometheus and promtool: the monitoring tests scrape the service and load the alert rules;
# * Chromium: the web console's browser tests drive it (Playwright for Python, through the system binary);
# * a JDK (17+): the Spark test runs Spark's own driver, which creates the executor pods (docs/job-kinds.md).
# Idempotent, non-interactive (CI runs it as root with no standard input).
set -euo pipefail
missing=()
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  missing+=(prometheus)
fi
if ! command -v chromium >/dev/null; then
  missing+=(chromium)
fi
if ! command -v javac >/dev/null; then
  missing+=(default-jdk-headless)
fi
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "system-deps: ${missing[*]} missing; install as root: apt-get install ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq </dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null
# The prometheus package enables a systemd unit; nothing here runs it (the tests start their own server).
command -v promtool >/dev/null
command -v chromium >/dev/null
command -v javac >/dev/null
