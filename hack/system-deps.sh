#!/usr/bin/env bash
# System packages the tests need beyond Python and Go: Prometheus and promtool (Debian's package), used by
# the monitoring tests to scrape the service and to load the alert rules. Idempotent.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "system-deps: prometheus/promtool are missing; install them as root: apt-get install prometheus" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# The package enables a systemd unit; nothing here runs it (the tests start their own server).
command -v promtool >/dev/null
