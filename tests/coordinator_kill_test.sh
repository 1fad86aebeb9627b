#!/usr/bin/env bash
# Issue 54: the coordinator SIGKILLed in the middle of a sharded run of a 64 MiB model, and
# started again on its state folder: the two node leaders (real processes) train on from their
# own copies, the run completes, both end bit-identical, and the coordinator received no model
# bytes: its rounds carried none, it saved no model.bin, and the restarted one was sent no
# model at all (it went on from the run record's digests, docs/design.md, "Persistence").
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "kill-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"

flags=(--state_dir="$WORK/state" --token_file="$WORK/token" --lease_timeout=60s)
start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 "${flags[@]}"
first=$coord_pid
VALUES=16777216  # 64 MiB of fp32
ROUNDS=8
members=()
for node in node-0 node-1; do
  "$BIN/tests/testutil/averaging_member" --coordinator="$GRPC" --token=kill-token --node="$node" \
    --values=$VALUES --rounds=$ROUNDS >"$WORK/$node.out" 2>"$WORK/$node.err" &
  members+=($!)
  pids+=($!)
done
wait_status 'len(members) == 2' "the two members did not join" 30
start_run <<SPEC
model { builtin: "mlp" } min_workers: 2 total_steps: 1000000 round_deadline_seconds: 60
outer_optimizer { lr: 0.7 momentum: 0.9 nesterov: true }
SPEC
wait_status 'run["round"] >= 2' "no two rounds before the kill" 120
kill -9 "$first"
wait "$first" 2>/dev/null || true
mv "$WORK/coord.err" "$WORK/coord-first.err"
sleep 1  # the members' syncs fail meanwhile
start_coordinator --grpc_address="$GRPC" --http_address="$HTTP" "${flags[@]}"
expect_status 'events("model_restored")' "the restarted coordinator did not take the run record's model"

for m in "${members[@]}"; do wait "$m" || fail "a member failed: $(tail -3 "$WORK"/node-*.err)"; done
a=$(grep '^final round' "$WORK/node-0.out") || fail "node-0 printed no final model"
b=$(grep '^final round' "$WORK/node-1.out") || fail "node-1 printed no final model"
[[ $a == "$b" ]] || fail "the members ended apart: node-0 $a, node-1 $b"
[[ $a == "final round $ROUNDS "* ]] || fail "the members ended at another round: $a"
echo "both members: $a"
# No model bytes at either coordinator: each round's record says 0 B in and out, the restarted
# one's counters too, and it was never sent a model; nothing model-sized on its disk.
grep -q "round [0-9]* committed" "$WORK/coord-first.err" || fail "no round committed before the kill"
if grep "round [0-9]* committed" "$WORK/coord-first.err" "$WORK/coord.err" | grep -v ", 0 B in, 0 B out"; then
  fail "a round carried model bytes to or from the coordinator"
fi
expect_status 'int(s.get("bytes_received_total", 0)) == 0 and int(s.get("bytes_sent_total", 0)) == 0' \
  "the restarted coordinator counted model bytes"
! grep -q "initial model" "$WORK/coord.err" || fail "the restarted coordinator was sent a model"
[[ ! -e "$WORK/state/model.bin" ]] || fail "the coordinator saved the model"
size=$(du -sb "$WORK/state" | cut -f1)
(( size < 1048576 )) || fail "the state folder holds $size bytes"
echo PASS
