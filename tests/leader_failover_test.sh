#!/usr/bin/env bash
# A node leader (local rank 0) SIGKILLed during training, with real processes, in the run's
# exchange mode EXCHANGE (EXCHANGE_SHARDED or EXCHANGE_STAR). Its node's other ranks notice at
# their next collective, re-form, and local rank 1 takes the node's lead: it claims it at the
# coordinator in the dead leader's place (which drops the dead leader at once: the lease here
# is 150 s, longer than a rank left blocked in a collective with the dead one can wait before
# the node re-forms, 2 x round_deadline_seconds + 60 s; no lease_expired event may name it),
# starts its own data plane, takes the committed model, and the node goes on. Every later round
# has both nodes, every surviving rank holds the same parameters after each of them, the run
# completes, and the model the new leader saves is the run's final global model. Two nodes x
# three ranks. With OVERLAP (overlap_steps, default 0) the rounds overlap training: the leader
# dies with a round in flight or between rounds; its rounds' merges are not compared across
# ranks (each keeps its own progress), but every survivor ends on the final model (402 steps:
# a last sync after the round in flight).
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "failover-token" > "$WORK/token"
mkdir -p "$WORK/dump"
source "$BIN/tests/testutil/test_helpers.sh"

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 \
  --token_file="$WORK/token" --lease_timeout=150s --heartbeat_interval=1s

start_workers 2 3 --log_every=50 --save_model="$WORK/model.pt" --checkpoint_dir="$WORK/checkpoints"
start_run <<SPEC
model { builtin: "mlp" }
dataset { synthetic_samples: 4096 }
local_sgd_steps: ${LOCAL_SGD_STEPS:-4}
overlap_steps: ${OVERLAP:-0}
fragments: ${FRAGMENTS:-1}
total_steps: $(( ${OVERLAP:-0} > 0 ? 402 : 400 ))
batch_size: 32
min_workers: 4
round_deadline_seconds: 5
optimizer { lr: 0.05 momentum: 0.9 }
exchange: ${EXCHANGE}
chunk_bytes: 65536
min_shard_bytes: 0
SPEC

wait_status 's["rounds_committed_total"] >= 8' "no 8 rounds before the kill" 90
kill -9 "${worker_pids[00]}"
wait "${worker_pids[00]}" 2>/dev/null || true

for w in 01 02 10 11 12; do wait "${worker_pids[$w]}" || fail "worker $w failed (exit $?)"; done
# Removed at once (leader_replaced, below), not when its 150 s lease ran out: read from the
# coordinator's events rather than from a clock, which a loaded machine (or ASan) stretches.
expect_status 'not events("lease_expired", "node-0/0")' \
  "the run waited for the dead leader's lease"
expect_status 'run["state"] == "RUN_STATE_COMPLETED"' "run not completed"
# Rounds go on after the hand-over: at least half the run's rounds commit (issue 50, finding 3:
# with fragments the nodes fell out of phase and 12 of about 200 committed).
expected_rounds=$(( 400 / (${LOCAL_SGD_STEPS:-4} / ${FRAGMENTS:-1}) ))
expect_status "s['rounds_committed_total'] >= $expected_rounds / 2" \
  "fewer than half of the run's $expected_rounds rounds committed"
expect_status 'any("node-0/1 leads its node now" in e["text"] for e in events("leader_replaced", "node-0/0"))' \
  "the coordinator did not replace the dead leader with local rank 1"
expect_status 'run["model_path"] == "'"$WORK/model.pt"'" and
               [e["worker_id"] for e in events("model_saved")] == ["node-0/1"]' \
  "the new leader (alone) did not save the model"
# Every round before the hand-over has the first leaders, every round after it both nodes'
# leaders, and there are such rounds.
expect_status '[members_of(r) for r in committed] ==
               sorted([members_of(r) for r in committed], key=lambda m: "node-0/1" in m)
               and all(members_of(r) in (["node-0/0", "node-1/0"], ["node-0/1", "node-1/0"])
                       for r in committed)
               and members_of(committed[-1]) == ["node-0/1", "node-1/0"]' \
  "a round after the hand-over went without one of the nodes"
# Sharded: the new leader serves its own data plane and owns a range.
if [[ $EXCHANGE == EXCHANGE_SHARDED ]]; then
  expect_status 'sorted(x["owner_id"] for x in committed[-1]["shards"]) == ["node-0/1", "node-1/0"]' \
    "the last round is not sharded over both nodes' leaders"
fi
"$BIN/coordinator/localsgdctl" --coordinator="$GRPC" --token_file="$WORK/token" fetch \
  --out="$WORK/final.bin" >/dev/null || fail "fetch failed"

/usr/bin/python3 - "$WORK" "${OVERLAP:-0}" <<'PY' || fail "check failed"
import glob, os, sys
import numpy as np
work, overlap = sys.argv[1], int(sys.argv[2])
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
# Overlapped rounds leave the ranks apart by design: only the last sync counts (above).
assert checked >= (5 if overlap == 0 else 0), \
    f"only {checked} rounds after the hand-over left the survivors identical"
print(f"hand-over at step {handover}; {checked} later rounds identical on the 5 survivors; "
      "all end on the run's final model")
PY
expect_accuracy 0.6 node-0/1 node-1/0
echo "$(committed_rounds) rounds committed (of about $expected_rounds)"
echo PASS
