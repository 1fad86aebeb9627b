#!/usr/bin/env bash
# A node leader (local rank 0) SIGKILLed during training, with real processes, in the run's
# exchange mode EXCHANGE (EXCHANGE_SHARDED or EXCHANGE_STAR). Its node's other ranks notice at
# their next collective, re-form, and local rank 1 takes the node's lead: it claims it at the
# coordinator in the dead leader's place (which drops the dead leader at once: the lease here
# is 60 s, far longer than the test waits), starts its own data plane, takes the committed
# model, and the node goes on. Every later round has both nodes, every surviving rank holds
# the same parameters after each of them, the run completes, and the model the new leader
# saves is the run's final global model. Two nodes x three ranks.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "failover-token" > "$WORK/token"
mkdir -p "$WORK/dump"
source "$BIN/tests/testutil/test_helpers.sh"

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 \
  --token_file="$WORK/token" --lease_timeout=60s --heartbeat_interval=1s

start_workers 2 3 --log_every=50 --save_model="$WORK/model.pt"
start_run <<SPEC
model { builtin: "mlp" }
dataset { synthetic_samples: 4096 }
local_sgd_steps: 4
total_steps: 400
batch_size: 32
min_workers: 4
round_deadline_seconds: 5
optimizer { lr: 0.05 momentum: 0.9 }
exchange: ${EXCHANGE}
chunk_bytes: 65536
SPEC

for _ in $(seq 1 900); do [[ $(committed_rounds) -ge 8 ]] && break; sleep 0.1; done
[[ $(committed_rounds) -ge 8 ]] || fail "no 8 rounds before the kill"
killed_at=$(date +%s)
kill -9 "${worker_pids[00]}"
wait "${worker_pids[00]}" 2>/dev/null || true

for w in 01 02 10 11 12; do wait "${worker_pids[$w]}" || fail "worker $w failed"; done
finished_at=$(date +%s)
(( finished_at - killed_at < 60 )) || fail "the run waited for the dead leader's lease"
status=$("$BIN/coordinator/localsgdctl" --coordinator="$GRPC" status)
grep -q "COMPLETED" <<<"$status" || fail "run not completed: $status"
for r in 1 2; do
  grep -q "the node leader (local rank 0) died; local rank 1 leads the node from now on" \
    "$WORK/w0$r.err" || fail "node-0 rank $r did not hand the lead to local rank 1"
done
grep -q "worker node-0/0 removed: node-0/1 leads its node now" "$WORK/coord.err" \
  || fail "the coordinator did not replace the dead leader"
grep -q "saved the trained model" "$WORK/w01.out" || fail "the new leader did not save the model"
# Every round after the hand-over has both nodes' leaders.
after=$(sed -n '/node-0\/0 removed/,$p' "$WORK/coord.err" | grep " committed: " || true)
[[ -n $after ]] || fail "no round committed after the hand-over"
if grep -v "members (node-0/1, node-1/0)" <<<"$after" >&2; then
  fail "a round after the hand-over went without one of the nodes"
fi
# Sharded: the new leader serves its own data plane and owns a range.
if [[ $EXCHANGE == EXCHANGE_SHARDED ]]; then
  grep -q "data plane listening on" "$WORK/w01.err" || fail "the new leader serves no data plane"
  tail -n 1 <<<"$after" | grep -q "sharded over 2 owners" || fail "not sharded over both nodes"
fi
"$BIN/coordinator/localsgdctl" --coordinator="$GRPC" --token_file="$WORK/token" fetch \
  --out="$WORK/final.bin" >/dev/null || fail "fetch failed"

/usr/bin/python3 - "$WORK" <<'PY' || fail "check failed"
import glob, os, re, sys
import numpy as np
work = sys.argv[1]
survivors = ["node-0-1", "node-0-2", "node-1-0", "node-1-1", "node-1-2"]
def step_of(path):
    return int(os.path.basename(path).split("-")[3])
# After the hand-over every sync of the survivors leaves them identical (both nodes took the
# same committed model, or the same round's result).
handover = min(step_of(p) for p in glob.glob(f"{work}/dump/node-0-1-*-post.bin")
               if not os.path.exists(p.replace("node-0-1", "node-0-0")))
final = np.fromfile(f"{work}/final.bin", dtype=np.float32)
checked = 0
for worker in survivors:
    last = max(glob.glob(f"{work}/dump/{worker}-*-post.bin"), key=step_of)
    assert np.array_equal(np.fromfile(last, dtype=np.float32), final), \
        f"{worker} ended on other parameters than the run's final model"
for step in sorted({step_of(p) for p in glob.glob(f"{work}/dump/node-1-0-*-post.bin")}):
    if step <= handover:
        continue
    posts = [f"{work}/dump/{w}-{step}-post.bin" for w in survivors]
    if not all(os.path.exists(p) for p in posts):
        continue  # a node whose step the hand-over moved syncs at other step numbers
    arrays = [np.fromfile(p, dtype=np.float32) for p in posts]
    if all(np.array_equal(arrays[0], a) for a in arrays):
        checked += 1
assert checked >= 5, f"only {checked} rounds after the hand-over left the survivors identical"
print(f"hand-over at step {handover}; {checked} later rounds identical on the 5 survivors; "
      "all end on the run's final model")
PY
expect_accuracy 0.6 "$WORK"/w01.out "$WORK"/w10.out
echo PASS
