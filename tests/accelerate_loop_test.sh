#!/usr/bin/env bash
# Issue 49, finding 3: Accelerate's own LocalSGD loop (accelerator.prepare, accumulate,
# backward, step() once per micro-batch, a DistributedDataParallel model) runs against a real
# coordinator with two lines changed: the import and the constructor's quick-try arguments.
# Accelerate cannot be installed here (not a Debian package), so tests/accelerate_stand_in.py
# plays the part of its API that the loop touches.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "accelerate-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"
export PYTHONPATH="$BIN/python:$BIN/tests" LOCALSGD_TOKEN_FILE="$WORK/token"
export LOCALSGD_RENDEZVOUS_DIR="$WORK" LOCALSGD_NODE_NAME=accelerate OMP_NUM_THREADS=1

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 --token_file="$WORK/token"
export LOCALSGD_COORDINATOR="$GRPC"
/usr/bin/python3 "$BIN/tests/accelerate_loop.py" "$WORK" >"$WORK/loop.out" 2>"$WORK/loop.err" ||
  fail "the loop failed: $(tail -20 "$WORK/loop.err")"
cat "$WORK/loop.out"
grep -q "^optimizer steps 48, localsgd steps 48, syncs 6, micro-batches 96$" "$WORK/loop.out" ||
  fail "steps were not counted per optimizer step"
expect_status 'run["state"] == "RUN_STATE_COMPLETED" and run["global_step"] == 48' \
  "the run did not complete at its 48 optimizer steps"
echo PASS
