#!/usr/bin/env bash
# Builds the CPU container images from Debian's packages on this machine, with no registry:
# mmdebstrap makes a Debian 12 root file system holding the packages of the libraries the
# binaries load (read off the binaries themselves) and the staged binaries (stage.sh), and
# podman imports it as an image:
#   localsgd-coordinator:TAG   coordinator and localsgdctl; entrypoint: the coordinator
#   localsgd-worker:TAG        worker, localsgdctl, launch-ranks, OpenBLAS (OpenMP) and Debian's
#                              Fashion-MNIST; entrypoint: the worker
# Both run as uid 65532 (the Kubernetes manifests' runAsUser), with /opt/localsgd/bin on PATH.
# The CUDA worker's recipe is deploy/Dockerfile (--build-arg TORCH=cuda): it needs a CUDA
# LibTorch and toolkit that Debian does not package.
#
# Usage: deploy/image/build.sh [--tag TAG] [--bin DIR] [--suite SUITE] [--mirror URL]
#   TAG: default the release in VERSION (what deploy/k8s pins); DIR: coordinator, localsgdctl, worker and launch-ranks built
#   already (default: stage.sh builds them); SUITE: default bookworm; URL: default the host's
#   apt sources.
set -euo pipefail
cd "$(dirname "$0")/../.."

tag=""
suite=bookworm
mirror=()
bin=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) tag=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --suite) suite=$2; shift 2 ;;
    --mirror) mirror=("$2"); shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument \"$1\" (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n $tag ]] || tag=$(cat VERSION)
for tool in mmdebstrap podman; do
  command -v "$tool" >/dev/null || { echo "build.sh: needs $tool (scripts/setup.sh)" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ -z $bin ]]; then
  deploy/image/stage.sh cpu "$work/opt" >&2
  bin="$work/opt/bin"
fi

# The Debian packages holding the shared libraries that BINARIES name directly (apt brings
# what those need in turn). dpkg knows a library by /lib or /usr/lib (merged /usr): both asked.
packages_of() {
  local bin lib path paths=()
  for bin in "$@"; do
    for lib in $(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      path=$(ldd "$bin" | awk -v lib="$lib" '$1 == lib && $3 ~ /^\// {print $3}')
      [[ -n $path ]] || { echo "build.sh: $bin: $lib not found" >&2; exit 1; }
      path=$(readlink -f "$path")
      paths+=("$path" "${path#/usr}")
    done
  done
  { dpkg -S "${paths[@]}" 2>/dev/null || true; } | cut -d: -f1 | sort -u
}

# image NAME ENTRYPOINT PACKAGES BINARIES...: builds localsgd-NAME:TAG.
image() {
  local name=$1 entrypoint=$2 packages=$3
  shift 3
  local root="$work/$name"
  mkdir -p "$root/bin"
  cp "$@" "$root/bin/"
  mmdebstrap --variant=apt --include="$packages" \
    --customize-hook="mkdir -p \"\$1/opt/localsgd\"" \
    --customize-hook="copy-in $root/bin /opt/localsgd" \
    --customize-hook='echo "localsgd:x:65532:65532::/nonexistent:/usr/sbin/nologin" >> "$1/etc/passwd"' \
    --customize-hook='echo "localsgd:x:65532:" >> "$1/etc/group"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    "$suite" "$work/$name.tar" "${mirror[@]}" >&2
  podman import \
    --change "ENTRYPOINT [\"/opt/localsgd/bin/$entrypoint\"]" \
    --change "USER 65532" \
    --change "ENV PATH=/opt/localsgd/bin:/usr/local/bin:/usr/bin:/bin" \
    --message "localsgd $name $tag" \
    "$work/$name.tar" "localsgd-$name:$tag" >/dev/null
  rm -f "$work/$name.tar"
  echo "localsgd-$name:$tag"
}

coordinator_packages=$(packages_of "$bin/coordinator" "$bin/localsgdctl" | paste -sd, -)
image coordinator coordinator "$coordinator_packages,ca-certificates" \
  "$bin/coordinator" "$bin/localsgdctl"
worker_packages=$(packages_of "$bin/worker" "$bin/localsgdctl" | paste -sd, -)
image worker worker "$worker_packages,libopenblas0-openmp,dataset-fashion-mnist,ca-certificates" \
  "$bin/worker" "$bin/localsgdctl" "$bin/launch-ranks"
