#!/usr/bin/env bash
# examples/custom_loop.cc, a user's own LibTorch loop with the two localsgd lines, as real
# processes started with torchrun's variables: two nodes train a run of `model { custom: ... }` with gradient accumulation; the
# run completes with both nodes in every round, both end on the same parameters bit for bit,
# and both learn the task. The worker program refuses such a run with a clear error.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "custom-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 --token_file="$WORK/token"
workers=()
for node in 0 1; do
  LOCALSGD_COORDINATOR="$GRPC" LOCALSGD_TOKEN_FILE="$WORK/token" LOCALSGD_NODE_NAME="node-$node" \
    LOCALSGD_RENDEZVOUS_DIR="$WORK" RANK=$node WORLD_SIZE=2 \
    "$BIN/examples/custom_loop" "$WORK/params-$node.bin" >"$WORK/c$node.out" 2>"$WORK/c$node.err" &
  pids+=($!)
  workers+=($!)
done
start_run <<SPEC
name: "custom"
model { custom: "teacher-mlp" }
local_sgd_steps: 4
gradient_accumulation_steps: 2
total_steps: 200
batch_size: 32
min_workers: 2
optimizer { lr: 0.05 }
SPEC
for p in "${workers[@]}"; do wait "$p" || fail "custom_loop $p failed"; done

expect_status 'run["state"] == "RUN_STATE_COMPLETED" and run["global_step"] == 200' "run not completed"
expect_status 'len(committed) == 50 and all(members_of(r) == ["node-0/0", "node-1/0"] for r in committed)' \
  "not every round had both nodes"
cmp -s "$WORK/params-0.bin" "$WORK/params-1.bin" || fail "the nodes ended on different parameters"
[[ $(stat -c %s "$WORK/params-0.bin") -gt 0 ]] || fail "no parameters written"
# Chance is 0.25 on the 4 classes.
expect_status 'sorted(results) == ["node-0/0", "node-1/0"] and
               all(r["step"] == 200 and r["test_accuracy"] > 0.8 for r in results.values())' \
  "the task was not learned"

# The worker program cannot build a custom model: it says so, and the run fails with that.
"$BIN/worker/worker" --coordinator="$GRPC" --token_file="$WORK/token" --node_name=node-w \
  --rendezvous_dir="$WORK" >"$WORK/w.out" 2>"$WORK/w.err" &
pids+=($!)
worker=$!
echo 'name: "custom-2" model { custom: "teacher-mlp" } min_workers: 1' | start_run
rc=0
wait "$worker" || rc=$?
[[ $rc == 1 ]] || fail "the worker exited $rc on a custom model, not 1"
wait_status 'run["state"] == "RUN_STATE_FAILED" and "model.custom" in run["reason"]' \
  "the run did not fail naming model.custom" 30
echo PASS
