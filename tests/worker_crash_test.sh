#!/usr/bin/env bash
# A node leader SIGKILLed during training: the round it misses commits with the others at the
# deadline; the worker started again rejoins (a new generation), fetches the global model,
# resumes at the run's global step and takes part in the rounds again; the run completes, the
# surviving replicas held the same parameters after every round, and the synthetic task
# reaches its accuracy. Three nodes x one rank, real processes.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "crash-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 \
  --token_file="$WORK/token" --lease_timeout=8s --heartbeat_interval=1s

start_worker() {  # node, log name, dump folder
  mkdir -p "$WORK/$3"
  "$BIN/tests/testutil/dumping_worker" --coordinator="$GRPC" --token_file="$WORK/token" --node_name="node-$1" \
    --node_rank="$1" --num_nodes=3 --rendezvous_dir="$WORK" --dump_dir="$WORK/$3" \
    --log_every=50 >"$WORK/$2.out" 2>"$WORK/$2.err" &
  pids+=($!)
}
start_worker 0 w0 dump; w0=$!
start_worker 1 w1 dump; w1=$!
start_worker 2 w2 dump; w2=$!
start_run <<SPEC
model { builtin: "mlp" }
dataset { synthetic_samples: 4096 }
local_sgd_steps: 4
total_steps: 480
batch_size: 32
min_workers: 2
round_deadline_seconds: 3
optimizer { lr: 0.05 momentum: 0.9 }
SPEC

wait_status 's["rounds_committed_total"] >= 8' "no 8 rounds before the kill" 60
kill -9 "$w1"
wait "$w1" 2>/dev/null || true
killed_after=$(committed_rounds)
# The next round waits for node-1/0 until its deadline, then commits with the others.
wait_status 'any(members_of(r) == ["node-0/0", "node-2/0"] for r in committed)' \
  "no round committed without the killed leader" 10
# The restarted worker dumps apart from its first incarnation.
start_worker 1 w1-restarted dump-restarted; w1=$!

for p in "$w0" "$w1" "$w2"; do wait "$p" || fail "worker $p failed"; done
expect_status 'run["state"] == "RUN_STATE_COMPLETED"' "run not completed"
expect_status 'len(events("worker_joined", "node-1/0")) == 2' "the restarted worker did not join (one join per process)"
# After the rejoin, rounds have all three members again.
expect_status "any(len(r['members']) == 3 and r['round'] > $killed_after + 1 for r in committed)" \
  "the restarted leader never synced again"
rounds=$(committed_rounds)

/usr/bin/python3 - "$WORK" "$killed_after" "$rounds" <<'PY' || fail "check failed"
import glob, os, sys
import numpy as np
work, killed_after, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def step_of(path):
    return int(os.path.basename(path).split("-")[3].split(".")[0])
def syncs(node, folder):
    """The node leader's parameters after each sync that succeeded, by step."""
    failed = {step_of(p) for p in glob.glob(f"{work}/{folder}/node-{node}-0-*.failed")}
    steps = sorted({step_of(p) for p in glob.glob(f"{work}/{folder}/node-{node}-0-*-post.bin")})
    return {s: np.fromfile(f"{work}/{folder}/node-{node}-0-{s}-post.bin", dtype=np.float32).tobytes()
            for s in steps if s not in failed}
a, c = list(syncs(0, "dump").values()), list(syncs(2, "dump").values())
# A survivor that joined after the first round opened misses the first round(s), then takes
# part in every later one: its list is the end of the other's.
short, long = sorted((a, c), key=len)
assert short == long[len(long) - len(short):], "the survivors differ after a round"
assert len(long) == rounds, f"{len(long)} syncs for {rounds} committed rounds"
assert len(short) >= rounds - 5, f"a survivor took part in only {len(short)} of {rounds} rounds"
restarted = syncs(1, "dump-restarted")
# It resumed at the run's global step: its first sync is past the kill, not at step 4.
assert restarted and min(restarted) > 4 * killed_after, \
    f"the restarted worker did not resume at the run's step (first sync at {min(restarted, default=None)})"
resumed = list(restarted)
assert resumed and all(restarted[s] in set(long) for s in resumed), \
    "the restarted leader's rounds differ from the survivors'"
print(f"{rounds} rounds, identical on the survivors ({len(short)} and {len(long)} syncs); "
      f"the restarted leader shared {len(resumed)} of them")
PY

# Chance is 0.1; the MLP overfits these 4096 noisy samples (the restart test's spec run without
# faults ends at 0.70).
expect_accuracy 0.6 node-0/0 node-1/0 node-2/0
echo PASS
