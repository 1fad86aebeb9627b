#!/usr/bin/env bash
# README command (2): installs what is missing, then builds and runs every test.
# Extra arguments go to `bazel test` (e.g. a target pattern or --config=asan).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [[ $# -eq 0 ]]; then set -- //...; fi
exec bazel test "$@"
