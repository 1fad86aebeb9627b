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
  # Tests and benchmarks.
  libgtest-dev libgmock-dev libbenchmark-dev python3-torch python3-yaml curl ca-certificates
  openssl
  # Deployment tests: a real single-node Slurm cluster.
  slurm-wlm munge iproute2
  # The status page test (headless Chromium) and `promtool check metrics` on /metrics.
  chromium prometheus
  # Real data.
  dataset-fashion-mnist
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
