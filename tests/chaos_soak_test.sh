#!/usr/bin/env bash
# The chaos soak's short version (tests/chaos_soak.py): CHAOS_FAULTS faults (default 30, for
# CI's time) from seed CHAOS_SEED
# (default 1) on 2 nodes x 2 ranks, runs of CHAOS_TOTAL_STEPS (default 800; CI's time: the last
# run goes to its end after the last fault) with overlap_steps CHAOS_OVERLAP (default 0) and
# fragments CHAOS_FRAGMENTS (default 1), every invariant checked after each fault and at the
# end.
# The long version (200 faults) and its result: bench/RESULTS.md.
set -euo pipefail
BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
exec /usr/bin/python3 "$BIN/tests/chaos_soak.py" --bin "$BIN" --work "$TEST_TMPDIR/soak" \
  --faults "${CHAOS_FAULTS:-30}" --seed "${CHAOS_SEED:-1}" --mean_interval 0.5 \
  --total_steps "${CHAOS_TOTAL_STEPS:-800}" --overlap_steps "${CHAOS_OVERLAP:-0}" \
  --fragments "${CHAOS_FRAGMENTS:-1}"
