#!/usr/bin/env bash
# SIGTERM stops a training worker after its current step: it exits 0 at once, without waiting
# for a last sync the others are not ready for, and leaves the coordinator.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "term-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 --token_file="$WORK/token"
for node in 0 1; do
  "$BIN/worker/worker" --coordinator="$GRPC" --token_file="$WORK/token" --node_name="node-$node" \
    --node_rank=$node --num_nodes=2 --log_every=5 >"$WORK/w$node.out" 2>"$WORK/w$node.err" &
  pids+=($!)
done
victim=${pids[1]}
echo 'model { builtin: "mlp" } total_steps: 100000 local_sgd_steps: 4 min_workers: 2' | start_run
for _ in $(seq 1 600); do grep -q ' step 10/' "$WORK/w0.out" && break; sleep 0.1; done
grep -q ' step 10/' "$WORK/w0.out" || fail "training did not start"

kill -TERM "$victim"
start=$(date +%s)
rc=0
wait "$victim" || rc=$?
elapsed=$(( $(date +%s) - start ))
[[ $rc -eq 0 ]] || fail "worker exited $rc on SIGTERM"
(( elapsed < 20 )) || fail "worker took ${elapsed}s to stop"
grep -q "(stopped early)" "$WORK/w0.out" || fail "no early-stop report"
grep -q "worker node-0/0 left: stopped by signal" "$WORK/coord.err" || fail "worker did not leave"
echo PASS
