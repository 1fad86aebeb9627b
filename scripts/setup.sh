#!/usr/bin/env bash
# Installs every Debian package localsgd needs to build, test and run. Idempotent: when all
# are present it changes nothing and touches no network. Both README commands run it first.
set -euo pipefail

PACKAGES=(
  # Build: Bazel (with its JDK), the C++ compiler, protobuf and gRPC code generators.
  bazel-bootstrap default-jdk-headless g++ protobuf-compiler protobuf-compiler-grpc
  # libFuzzer targets (scripts/fuzz.sh): clang and its sanitizer and fuzzer runtimes.
  clang-14 libclang-rt-14-dev
  # The format check (scripts/format_check.sh).
  clang-format-14
  # Libraries.
  libgrpc++-dev libprotobuf-dev libabsl-dev libssl-dev zlib1g-dev libbrotli-dev
  libcpp-httplib-dev prometheus-cpp-dev nlohmann-json3-dev
  libtorch-dev libgloo-dev
  # The Python package (python/): headers for its native module.
  python3-dev pybind11-dev
  # LibTorch's matrix products go through the system's libblas.so.3: OpenBLAS built on OpenMP
  # shares LibTorch's OpenMP thread pool (torch::set_num_threads sets both), so the two never
  # oversubscribe the cores. Without it, the reference BLAS makes CPU training ~12x slower.
  libopenblas0-openmp
  # Tests and benchmarks.
  libgtest-dev libgmock-dev libbenchmark-dev python3-torch python3-yaml curl ca-certificates
  openssl
  # Deployment tests: a real single-node Slurm cluster; container images built from Debian's
  # packages and run (podman with runc, which also runs on cgroup v1 hosts).
  slurm-wlm munge iproute2 mmdebstrap podman runc
  # Round trips in the network-namespace harness (deploy/netns/hosts.sh): its delay line.
  iptables
  # The status page test (headless Chromium) and `promtool check metrics` on /metrics.
  chromium prometheus
  # Real data.
  dataset-fashion-mnist
)

# Debian selects the BLAS with an alternative; another optimised BLAS installed later (say
# OpenBLAS on pthreads, with a thread pool of its own) may take it: select the OpenMP build.
select_openblas() {
  local link=/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3
  local name=libblas.so.3-x86_64-linux-gnu
  [[ -e $link ]] || return 0
  [[ $(readlink -f /etc/alternatives/$name 2>/dev/null) == "$link" ]] && return 0
  if [[ $(id -u) -ne 0 && -z $SUDO ]]; then
    echo "setup: warning: libblas.so.3 is not OpenBLAS (OpenMP); as root run:" \
      "update-alternatives --set $name $link" >&2
    return 0
  fi
  $SUDO update-alternatives --set "$name" "$link" >&2
}

SUDO=""
if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null; then
  SUDO="sudo"
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  select_openblas
  exit 0
fi

if [[ $(id -u) -ne 0 && -z $SUDO ]]; then
  echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
select_openblas
