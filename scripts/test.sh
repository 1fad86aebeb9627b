#!/usr/bin/env bash
# README command (2): installs what is missing, then builds and runs every test.
# Extra arguments go to `bazel test` (e.g. a target pattern or --config=asan).
# Tests always run (no cached results); compiled objects come from the disk cache.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
if [[ $# -eq 0 ]]; then set -- //...; fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
bazel test --nocache_test_results --test_summary=short "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//[^ ]+ +PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|FLAKY|NO STATUS|FAILED TO BUILD)' "$log")
skipped=$(grep -cE '^//[^ ]+ +SKIPPED' "$log")
echo "targets: $passed passed, $failed failed, $skipped skipped"
exit "$rc"
