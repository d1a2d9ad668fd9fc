#!/usr/bin/env bash
# Builds the dev cluster's upstream binaries (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, etcd, kwok) from their published Go modules into a cache
# directory outside the work tree, keyed by version. A second run rebuilds nothing.
#
# The Helm CLI (for the chart in manifests/helm/) is built the same way, from helm.sh/helm/v3, into its own
# versioned directory beside them.
#
# The peer scheduler Kueue (for the peer benchmark only, never for tests or CI) is built from the small
# wrapper module gomod-kueue/ into kueue-<version>/, also beside them.
#
# Usage: build-binaries.sh            prints the directory holding the Kubernetes binaries
#        build-binaries.sh helm       prints the directory holding the helm binary
#        build-binaries.sh kueue      prints the directory holding the kueue manager binary
#        build-binaries.sh spark      prints the directory holding Spark's jars (jars/), from PyPI's pyspark
#        build-binaries.sh operators [NAME]
#                                     builds the job operators (training-operator, kuberay, argo-workflows, jobset,
#                                     mpi-operator) and prints one line per operator: NAME DIR BINARY (DIR also
#                                     holds crds/, rbac/)
# Env:   KQ_CACHE_DIR (default ~/.cache/kube-queue), KQ_HELM_VERSION, KQ_TRAINING_OPERATOR_VERSION,
#        KQ_KUBERAY_VERSION, KQ_ARGO_VERSION, KQ_JOBSET_VERSION,
#        KQ_MPI_OPERATOR_VERSION, KQ_SPARK_VERSION (defaults below)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
gomod="$here/gomod"
cache="${KQ_CACHE_DIR:-$HOME/.cache/kube-queue}"
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local

# One binary NAME at VERSION into $cache/bin/NAME-VERSION/, built once: a later call finds it there. The function
# COMPILE, called with VERSION and a temporary directory, puts the binary NAME into that directory; COLD says in
# the progress line how long a build from nothing takes. Prints the directory.
build_cached() {
  local name="$1" version="$2" cold="$3" compile="$4"
  local dir="$cache/bin/${name}-${version}"
  if [ -x "$dir/$name" ]; then echo "$dir"; return 0; fi
  command -v go >/dev/null || { echo "build-binaries: Go is not installed; install Go 1.26+ and retry" >&2; exit 1; }
  build_tmp="$dir.tmp.$$"
  mkdir -p "$build_tmp"
  trap 'rm -rf "$build_tmp"' EXIT
  local started
  started=$(date +%s)
  echo "build-binaries: building ${name} ${version} (cold: ${cold})" >&2
  "$compile" "$version" "$build_tmp"
  [ -x "$build_tmp/$name" ] || { echo "build-binaries: ${name} was not built; see the Go output above" >&2; exit 1; }
  mkdir -p "$dir"
  mv -f "$build_tmp/$name" "$dir/$name"
  echo "build-binaries: ${name} done in $(( $(date +%s) - started ))s" >&2
  echo "$dir"
}

compile_helm() {
  local version="$1" tmp="$2"
  # go install pkg@version builds with helm's own go.mod, so the Kubernetes module graph above is untouched.
  GOBIN="$tmp" nice -n 10 go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${version} -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
    "helm.sh/helm/v3/cmd/helm@${version}"
}

build_helm() {
  build_cached helm "${KQ_HELM_VERSION:-v3.22.0}" "a few minutes" compile_helm
}

compile_kueue() {
  local version="$1" tmp="$2"
  (
    cd "$here/gomod-kueue"
    nice -n 10 go build -trimpath \
      -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${version}" \
      -o "$tmp/kueue" sigs.k8s.io/kueue/cmd/kueue
  )
}

build_kueue() {
  local version
  version="$(awk '$1=="require" && $2=="sigs.k8s.io/kueue"{print $3}' "$here/gomod-kueue/go.mod" | head -n1)"
  build_cached kueue "$version" "about 6 minutes of CPU" compile_kueue
}

# The job operators of the dev cluster (docs/job-kinds.md), each from its own Go module with its own go.mod
# (none has replace directives), into <name>-<version>/ beside the Kubernetes binaries. The genuine CRDs and the
# operator's own RBAC manifests are copied from the same module download (`go mod download -json` names its
# directory) into crds/ and rbac/ there, so the dev cluster never needs the module cache at run time.
# More directories of the same download (SRC=DST, comma-separated, or -): the training operator's own webhook
# configuration; Argo's minimal CRDs (the dev cluster installs the full Workflow CRD, the minimal others); JobSet's
# webhook configuration and the patches its kustomization applies to it.
#   name              module                                        package                       crds                       rbac                                                         more
OPERATORS=(
  "training-operator github.com/kubeflow/training-operator          cmd/training-operator.v1      manifests/base/crds        manifests/base/rbac                                          manifests/base/webhook=webhooks"
  "kuberay           github.com/ray-project/kuberay/ray-operator    .                             config/crd/bases           config/rbac                                                  -"
  "argo-workflows    github.com/argoproj/argo-workflows/v4          cmd/workflow-controller       manifests/base/crds/full   manifests/cluster-install-no-crds/workflow-controller-rbac   manifests/base/crds/minimal=crds-minimal"
  "jobset            sigs.k8s.io/jobset                             .                             config/components/crd/bases config/components/rbac                                   config/components/webhook=webhooks,config/components/webhook/patches=webhook-patches"
  "mpi-operator      github.com/kubeflow/mpi-operator               cmd/mpi-operator              manifests/base             manifests/base                                               -"
)
operator_version() {
  case "$1" in
    training-operator) echo "${KQ_TRAINING_OPERATOR_VERSION:-v1.8.1}" ;;
    kuberay) echo "${KQ_KUBERAY_VERSION:-v1.5.0}" ;;
    argo-workflows) echo "${KQ_ARGO_VERSION:-v4.0.5}" ;;
    jobset) echo "${KQ_JOBSET_VERSION:-v0.8.2}" ;;
    mpi-operator) echo "${KQ_MPI_OPERATOR_VERSION:-v0.7.0}" ;;
  esac
}

build_operator() {
  local name="$1" module="$2" package="$3" crds="$4" rbac="$5" more="$6"
  local version binary dir
  version="$(operator_version "$name")"
  binary="$(basename "${package/#./$module}")"
  dir="$cache/bin/${name}-${version}"
  local complete=1 pair
  for pair in ${more//,/ }; do [ "$pair" = "-" ] || [ -d "$dir/${pair#*=}" ] || complete=0; done
  if [ -x "$dir/$binary" ] && [ -d "$dir/crds" ] && [ -d "$dir/rbac" ] && [ "$complete" = 1 ]; then
    echo "$name $dir $binary"; return 0
  fi
  command -v go >/dev/null || { echo "build-binaries: Go is not installed; install Go 1.26+ and retry" >&2; exit 1; }
  local tmp="$dir.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp/crds" "$tmp/rbac"
  local started
  started=$(date +%s)
  echo "build-binaries: building ${name} ${version} from ${module} (cold: a few minutes)" >&2
  local source
  source="$(go mod download -json "${module}@${version}" | awk -F'"' '$2=="Dir"{print $4}')"
  [ -d "$source" ] || { echo "build-binaries: go mod download ${module}@${version} gave no directory" >&2; rm -rf "$tmp"; exit 1; }
  local target="$module"
  [ "$package" = "." ] || target="$module/$package"
  # `go install module@version` asks the proxy for the module's version list (for deprecations); where that list
  # is refused but the version is served (JobSet's, here), the same source is built in its own directory.
  if ! GOBIN="$tmp" nice -n 10 go install -trimpath -ldflags "-s -w" "${target}@${version}" \
    && ! (echo "build-binaries: building ${name} in its module directory instead" >&2; cd "$source" \
          && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$tmp/$binary" "./${package#.}"); then
    rm -rf "$tmp"; echo "build-binaries: ${name} was not built; see the Go output above" >&2; exit 1
  fi
  cp "$source/$crds"/*.yaml "$tmp/crds/"
  cp "$source/$rbac"/*.yaml "$tmp/rbac/"
  for pair in ${more//,/ }; do
    [ "$pair" = "-" ] && continue
    mkdir -p "$tmp/${pair#*=}" && cp "$source/${pair%%=*}"/*.yaml "$tmp/${pair#*=}/"
    rm -f "$tmp/${pair#*=}/kustomization.yaml"
  done
  rm -f "$tmp/crds/kustomization.yaml" "$tmp/rbac/kustomization.yaml"
  chmod -R u+w "$tmp"
  [ -x "$tmp/$binary" ] || { rm -rf "$tmp"; echo "build-binaries: ${name} made no ${binary}" >&2; exit 1; }
  rm -rf "$dir"
  mv "$tmp" "$dir"
  echo "build-binaries: ${name} ${version} done in $(( $(date +%s) - started ))s" >&2
  echo "$name $dir $binary"
}

build_operators() {
  local line
  for line in "${OPERATORS[@]}"; do
    # shellcheck disable=SC2086 # the table's columns are single words
    if [ -z "${1:-}" ] || [ "${line%% *}" = "$1" ]; then build_operator $line; fi
  done
}

# Spark's runtime, for the Spark test: no Spark operator can be had here (docs/job-kinds.md), but Spark itself can.
# PyPI's pyspark source package carries Spark's jars (with spark-kubernetes and its client); only the jars are kept,
# in $cache/spark-VERSION/jars/. About 450 MB downloaded once.
fetch_spark() {
  local version="${KQ_SPARK_VERSION:-4.1.1}"
  local dir="$cache/spark-${version}"
  if [ -f "$dir/jars/spark-kubernetes_2.13-${version}.jar" ]; then echo "$dir"; return 0; fi
  spark_tmp="$dir.tmp.$$"
  rm -rf "$spark_tmp"; mkdir -p "$spark_tmp"
  trap 'rm -rf "$spark_tmp"' EXIT
  echo "build-binaries: fetching Spark ${version}'s jars from PyPI (pyspark, about 450 MB)" >&2
  python3 -m pip download --quiet --no-deps --no-binary :all: -d "$spark_tmp" "pyspark==${version}" >&2
  tar -xzf "$spark_tmp/pyspark-${version}.tar.gz" -C "$spark_tmp" --strip-components=2 "pyspark-${version}/deps/jars"
  rm -f "$spark_tmp/pyspark-${version}.tar.gz"
  [ -f "$spark_tmp/jars/spark-kubernetes_2.13-${version}.jar" ] || { echo "build-binaries: no spark-kubernetes jar in pyspark ${version}" >&2; exit 1; }
  rm -rf "$dir"; mv "$spark_tmp" "$dir"
  echo "$dir"
}

case "${1:-}" in
  "") ;;
  spark) fetch_spark; exit 0 ;;
  helm) build_helm; exit 0 ;;
  kueue) build_kueue; exit 0 ;;
  operators) build_operators "${2:-}"; exit 0 ;;
  *) echo "build-binaries: unknown argument '$1'; use no argument (Kubernetes binaries), 'helm', 'kueue', 'spark' or 'operators [NAME]'" >&2; exit 2 ;;
esac

kube_version="$(awk '$1=="k8s.io/kubernetes"{print $2}' "$gomod/go.mod" | head -n1)"
etcd_version="$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$gomod/go.mod" | head -n1)"
kwok_version="${KQ_KWOK_VERSION:-v0.8.0}"
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
