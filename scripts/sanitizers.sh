#!/usr/bin/env bash
# The test suite under sanitizers: every test not tagged no_sanitizers (each such tag says why
# beside it: timing, or CI's time for code paths covered elsewhere; docs/development.md) under
# AddressSanitizer + UBSan (--config=asan; leaks too, with lsan.supp, which says why for each
# line), and common/ and coordinator/ under ThreadSanitizer (--config=tsan). Under TSan the
# tests tagged no_tsan are also skipped: they run a gRPC server, and Debian's gRPC is not
# built with TSan, so TSan cannot see how it orders its callback threads and takes each
# hand-off for a race (suppressing those frames would hide our handlers' code too). Our own
# locks are annotated for TSan (common/mutex.h). LOCALSGD_SANITIZED=1 tells the multi-process
# tests to run a shorter variant (fewer cases or repetitions: the code paths stay the same).
# Only what the tests run is built (--build_tests_only: not, say, the Python package's module,
# whose tests are no_sanitizers). Extra arguments go to both `bazel test` runs.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/suite_lib.sh
status=0
suite --config=asan --build_tests_only --test_tag_filters=-no_sanitizers --test_env=LOCALSGD_SANITIZED=1 "$@" \
  --test_env=LSAN_OPTIONS="suppressions=$PWD/lsan.supp:print_suppressions=0" //... || status=1
suite --config=tsan --build_tests_only --test_tag_filters=-no_tsan,-no_sanitizers "$@" \
  //common/... //exchange/... //coordinator/... || status=1
report_failures
exit "$status"
