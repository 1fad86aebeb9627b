#!/usr/bin/env bash
# Every process of a run killed (SIGKILL: the coordinator and every rank) and started again
# (docs/design.md, "Checkpoints"): the node leaders write checkpoints of every round, the
# coordinator's own model.bin never gets past the initial model (its share of the time for
# model writes is tiny), so the run can only come back through the members' checkpoints. It
# resumes from the newest checkpoint a node offers, at that checkpoint's global step (not from
# step 0), and completes with every rank on the run's final model.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "resume-token" > "$WORK/token"
mkdir -p "$WORK/dump"
source "$BIN/tests/testutil/test_helpers.sh"

coordinator_flags=(--state_dir="$WORK/state" --token_file="$WORK/token" --model_save_share=0.000001)
start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 "${coordinator_flags[@]}"
start_workers 2 2 --log_every=100 --checkpoint_dir="$WORK/checkpoints" --rendezvous_dir="$WORK/first"
start_run <<SPEC
model { builtin: "mlp" }
dataset { synthetic_samples: 4096 }
local_sgd_steps: 4
total_steps: 1200
batch_size: 32
min_workers: 4
optimizer { lr: 0.05 momentum: 0.9 }
outer_optimizer { lr: 0.8 momentum: 0.5 nesterov: true }
checkpoint_share: 1
SPEC
wait_status 'run.get("checkpoint", {}).get("round", 0) >= 20' "no checkpoint of round 20" 120
run_id=$(status_value 'run["run_id"]' | tr -d '"')
[[ $(status_value 'run["round"]') -lt 250 ]] || fail "the run was nearly over before the kill; make it longer"
kill_started
pids=()
for node in node-0 node-1; do
  [[ -f "$WORK/checkpoints/$node/checkpoint.bin" ]] || fail "$node wrote no checkpoint"
done
# What each node's file holds now: the run resumes from the newest of them.
newest=0
for node in node-0 node-1; do
  step=$(/usr/bin/python3 - "$WORK/checkpoints/$node/checkpoint.bin" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
payload = data[data.index(b"\n") + 1:]
# SavedModel: run_id (1), round (2), global_step (3) come first, as varints.
i, fields = 0, {}
while len(fields) < 3:
    key = payload[i]; i += 1
    if key & 7 == 2:
        n = payload[i]; i += 1 + n
        fields[key >> 3] = None
    else:
        v, shift = 0, 0
        while True:
            b = payload[i]; i += 1; v |= (b & 0x7F) << shift; shift += 7
            if b < 0x80: break
        fields[key >> 3] = v
print(fields.get(3, 0))
PY
)
  echo "$node's checkpoint: global step $step"
  (( step > newest )) && newest=$step
done
(( newest >= 80 )) || fail "the newest checkpoint is at global step $newest, not past round 20"

# Everything comes back: the coordinator on its state folder, the ranks on their checkpoints.
start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 "${coordinator_flags[@]}"
workers=()
start_workers 2 2 --log_every=100 --checkpoint_dir="$WORK/checkpoints" --rendezvous_dir="$WORK/second"
for p in "${workers[@]}"; do wait "$p" || fail "worker $p failed after the restart"; done
expect_status "run['run_id'] == '$run_id' and run['state'] == 'RUN_STATE_COMPLETED'" \
  "run $run_id did not complete after the restart"
expect_status "any(e['kind'] == 'model_restored' and 'checkpoint' in e['text'] for e in events())" \
  "no model_restored event names a checkpoint"
grep -h "the run goes on from the checkpoint of round" "$WORK"/w*0.err \
  || fail "no node leader resumed from its checkpoint"
resumed=$(sed -n 's/.*resuming from the global model at step \([0-9]*\).*/\1/p' "$WORK"/w00.out "$WORK"/w00.err | head -n 1)
[[ -n "$resumed" ]] || fail "node-0 did not resume a run in progress"
# A rank resumes at the checkpoint's step rounded down to a sync boundary (4 steps).
(( resumed >= newest / 4 * 4 - 4 )) || fail "resumed at step $resumed, the newest checkpoint was at $newest"
echo "PASS: killed at global step >= $newest (the coordinator's model.bin at step 0); resumed at step $resumed"

# Every rank ends on the run's final model.
finals=("$WORK"/dump/*-1200-post.bin)
(( ${#finals[@]} == 4 )) || fail "not every rank synced at step 1200: ${finals[*]}"
for f in "${finals[@]}"; do
  cmp -s "${finals[0]}" "$f" || fail "$f differs from ${finals[0]}"
done
echo "PASS: every rank ends on the same final model"
