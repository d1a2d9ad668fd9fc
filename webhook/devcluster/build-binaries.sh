#!/usr/bin/env bash
# Builds the dev cluster's upstream binaries (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, etcd, kwok) from their published Go modules into a cache
# directory outside the work tree, keyed by version. A second run rebuilds nothing.
#
# Usage: build-binaries.sh            prints the directory holding the binaries
# Env:   KQ_CACHE_DIR (default ~/.cache/kube-queue)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
gomod="$here/gomod"
kube_version="$(awk '$1=="k8s.io/kubernetes"{print $2}' "$gomod/go.mod" | head -n1)"
etcd_version="$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$gomod/go.mod" | head -n1)"
kwok_version="${KQ_KWOK_VERSION:-v0.8.0}"
cache="${KQ_CACHE_DIR:-$HOME/.cache/kube-queue}"
out="$cache/bin/kube-${kube_version}_etcd-${etcd_version}_kwok-${kwok_version}"

want=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok)
missing=()
for b in "${want[@]}"; do [ -x "$out/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} -eq 0 ]; then echo "$out"; exit 0; fi

command -v go >/dev/null || { echo "build-binaries: Go is not installed; install Go 1.26+ and retry" >&2; exit 1; }
mkdir -p "$out"
tmp="$out.tmp.$$"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

minor="${kube_version#v1.}"; minor="${minor%%.*}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${kube_version}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=${kube_version}"

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
start=$(date +%s)
echo "build-binaries: building Kubernetes ${kube_version} and etcd ${etcd_version} (cold: many minutes)" >&2
(
  cd "$gomod"
  go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl
  go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
)
echo "build-binaries: building kwok ${kwok_version}" >&2
GOBIN="$tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${kwok_version}"
for b in "${want[@]}"; do
  [ -x "$tmp/$b" ] || { echo "build-binaries: $b was not built; see the Go output above" >&2; exit 1; }
  mv -f "$tmp/$b" "$out/$b"
done
echo "build-binaries: done in $(( $(date +%s) - start ))s" >&2
echo "$out"
