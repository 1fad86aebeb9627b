#!/usr/bin/env bash
# A coordinator SIGKILLed in the middle of a run and restarted on the same state directory:
# two nodes x two ranks (real processes, Gloo in each node) train on through the outage,
# reconnect and carry on; the run completes with every rank on its final model, the round never
# goes back, and the synthetic task reaches its accuracy. Commits do not wait for model.bin
# (docs/design.md, "Persistence"), so the restart finds either the last commit's model (then the
# global step never goes back either, and every round that committed left all four ranks with
# identical parameters) or an older one (then the global step goes back once, to the saved
# model's, the restored event names the rounds lost, and every rank adopts it and trains on).
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "restart-token" > "$WORK/token"
mkdir -p "$WORK/dump"
source "$BIN/tests/testutil/test_helpers.sh"

coordinator_flags=(--state_dir="$WORK/state" --token_file="$WORK/token" --lease_timeout=20s)
start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 "${coordinator_flags[@]}"
first_coordinator=$coord_pid

start_workers 2 2 --log_every=20 --checkpoint_dir="$WORK/checkpoints"
start_run <<SPEC
model { builtin: "mlp" }
dataset { synthetic_samples: 4096 }
local_sgd_steps: 4
total_steps: 600
batch_size: 32
min_workers: 4
optimizer { lr: 0.05 momentum: 0.9 }
outer_optimizer { lr: 0.8 momentum: 0.5 nesterov: true }
SPEC

# Watches /status through the restart: one "round global_step" line per answer.
/usr/bin/python3 - "$HTTP" >"$WORK/progress.txt" 2>/dev/null <<'PY' &
import json, sys, time, urllib.request
while True:
    try:
        run = json.load(urllib.request.urlopen(f"http://{sys.argv[1]}/status", timeout=2))["run"]
        print(run.get("round", 0), run.get("global_step", 0), run.get("state"), flush=True)
        if run.get("state") in ("RUN_STATE_COMPLETED", "RUN_STATE_FAILED", "RUN_STATE_STOPPED"):
            break
    except OSError:
        pass
    time.sleep(0.1)
PY
monitor=$!
pids+=("$monitor")

round_now() { tail -n 1 "$WORK/progress.txt" 2>/dev/null | cut -d' ' -f1; }
for _ in $(seq 1 600); do
  [[ "$(round_now)" -ge 10 ]] 2>/dev/null && break
  sleep 0.1
done
[[ "$(round_now)" -ge 10 ]] || fail "no 10 rounds before the kill"
[[ "$(round_now)" -lt 140 ]] || fail "the run was nearly over before the kill; make it longer"
kill -9 "$first_coordinator"
killed_at=$(round_now)
# The workers train on; their syncs fail meanwhile. node-1 is paused through the outage until
# node-0 is back in touch with the new coordinator, so that the nodes' steps drift apart
# (node-1 must then follow the run's global step, or it would still be training, alone, when
# node-0 completes the run).
kill -STOP "${worker_pids[10]}" "${worker_pids[11]}"
# The coordinator stays down until one of node-0's syncs has failed (its dump says so): a
# restart quicker than node-0's next sync would leave the outage untested.
node0_failed() { compgen -G "$WORK/dump/node-0-0-*.failed" >/dev/null; }
for _ in $(seq 1 300); do node0_failed && break; sleep 0.05; done
node0_failed || fail "node-0 did not try to sync while the coordinator was down"
mv "$WORK/coord.out" "$WORK/coord-first.out"
mv "$WORK/coord.err" "$WORK/coord-first.err"
start_coordinator --grpc_address="$GRPC" --http_address="$HTTP" "${coordinator_flags[@]}"
expect_status 'events("model_restored")' "the global model was not restored"
wait_status 's["heartbeats_total"] > 0' "node-0 did not reconnect"
kill -CONT "${worker_pids[10]}" "${worker_pids[11]}"

for p in "${workers[@]}"; do wait "$p" || fail "worker $p failed"; done
wait "$monitor" || true

status=$("$BIN/coordinator/localsgdctl" --coordinator="$GRPC" status)
grep -q "COMPLETED" <<<"$status" || fail "run not completed: $status"
# The run's final global model, to compare with what every rank ended with.
"$BIN/coordinator/localsgdctl" --coordinator="$GRPC" --token_file="$WORK/token" fetch \
  --out="$WORK/final.bin" >/dev/null || fail "fetch failed"

/usr/bin/python3 - "$WORK" "$killed_at" <<'PY' || fail "check failed"
import glob, os, re, sys
import numpy as np
work, killed_at = sys.argv[1], int(sys.argv[2])
rows = [l.split() for l in open(f"{work}/progress.txt") if l.strip()]
pairs = [(int(r[0]), int(r[1])) for r in rows]
final_round = pairs[-1][0]
assert final_round > killed_at + 10, f"only {final_round} rounds, {killed_at} before the kill"
ranks = ["node-0-0", "node-0-1", "node-1-0", "node-1-1"]
# Every rank ends on the run's final global model, bit for bit (the last parameters it dumped,
# in its last pass). (Issue 12, finding 2: after the outage the nodes' steps drifted apart and
# the slower node trained on alone after the run completed.)
final = np.fromfile(f"{work}/final.bin", dtype=np.float32)
for rank in ranks:
    last_pass = max((p for p in glob.glob(f"{work}/dump/pass-*")
                     if glob.glob(f"{p}/{rank}-*-post.bin")),
                    key=lambda p: int(p.rsplit("-", 1)[1]))
    last = max(glob.glob(f"{last_pass}/{rank}-*-post.bin"),
               key=lambda p: int(os.path.basename(p).split("-")[3]))
    assert np.array_equal(np.fromfile(last, dtype=np.float32), final), \
        f"{rank} ended on other parameters than the run's final model ({last})"
restored = re.search(r"restored the global model of round (\d+) \(global step (\d+),.*rounds "
                     r"(\d+) to (\d+) were committed after it and their model is lost",
                     open(f"{work}/coord.err").read())
if restored:
    # The saved model was older than the record: the global step goes back once, to it.
    again, step = int(restored.group(1)), int(restored.group(2))
    backs = [(a, b) for a, b in zip(pairs, pairs[1:]) if b[1] < a[1]]
    assert all(b[0] >= a[0] for a, b in zip(pairs, pairs[1:])), "a round went back"
    assert len(backs) <= 1 and all(b[1] == step for a, b in backs), \
        f"the global step went back other than to the restored model's: {backs}"
    # Each node's ranks agree after every sync, in every pass.
    for node in (0, 1):
        for folder in glob.glob(f"{work}/dump/pass-*"):
            for leader_path in glob.glob(f"{folder}/node-{node}-0-*-post.bin"):
                other = leader_path.replace(f"node-{node}-0-", f"node-{node}-1-")
                if os.path.exists(other):
                    assert np.array_equal(np.fromfile(leader_path, dtype=np.float32),
                                          np.fromfile(other, dtype=np.float32)), \
                        f"{leader_path}: the node's ranks differ"
    print(f"model.bin was behind: the run went on from round {again} at step {step} "
          f"({restored.group(3)}-{restored.group(4)} lost); every rank ended on the final model")
    sys.exit(0)
for a, b in zip(pairs, pairs[1:]):
    assert b[0] >= a[0] and b[1] >= a[1], f"went back: {a} -> {b}"
# Steps whose sync failed (the outage, the end of the run) have a .failed file beside their
# dumps; every other sync committed a round, and each round leaves the same parameters on both
# nodes. (A node that reconnected first waits in the round for the other, so their step numbers
# differ.)
committed = {}
for node in (0, 1):
    failed = {int(os.path.basename(p).split("-")[3].split(".")[0])
              for p in glob.glob(f"{work}/dump/node-{node}-0-*.failed")}
    # node-0 trained through the outage (node-1 was paused through it).
    assert failed or node == 1, "node-0: no sync failed: the coordinator was not down during a sync"
    steps = sorted({int(os.path.basename(p).split("-")[3])
                    for p in glob.glob(f"{work}/dump/node-{node}-0-*-post.bin")})
    committed[node] = []
    for step in steps:
        leader, other = (np.fromfile(f"{work}/dump/node-{node}-{r}-{step}-post.bin",
                                     dtype=np.float32) for r in (0, 1))
        assert np.array_equal(leader, other), f"node-{node} step {step}: its ranks differ"
        if step not in failed:
            committed[node].append(leader.tobytes())
# The round the coordinator committed (and saved) just before the kill may have reached one
# node, both or neither: a node it did not reach is told after the restart that it is stale
# and adopts it (a failed sync that leaves that round's model, in some pass's dumps).
if committed[0] != committed[1]:
    longer, shorter, missed_by = ((committed[0], committed[1], 1)
                                  if len(committed[0]) > len(committed[1])
                                  else (committed[1], committed[0], 0))
    missed = [longer[i] for i in range(len(longer)) if longer[:i] + longer[i + 1:] == shorter]
    assert len(longer) == len(shorter) + 1 and missed, \
        "the nodes' parameters differ after a committed round"
    adopted = {np.fromfile(p, dtype=np.float32).tobytes()
               for p in glob.glob(f"{work}/dump/pass-*/node-{missed_by}-0-*-post.bin")}
    assert missed[0] in adopted, \
        f"node-{missed_by} missed a round's commit and never adopted that round's model"
rounds_synced = max(len(committed[0]), len(committed[1]))
# A round committed just before the kill that reached neither node: at most one.
assert final_round - 1 <= rounds_synced <= final_round, \
    f"{rounds_synced} syncs for {final_round} rounds"
print(f"{len(pairs)} status samples monotone; killed at round {killed_at}, final round "
      f"{final_round}; after each of the {final_round} rounds all 4 ranks identical")
PY

# Chance is 0.1; the MLP overfits these 4096 noisy samples (the restart test's spec run without
# faults ends at 0.70).
expect_accuracy 0.6 node-0/0 node-0/1 node-1/0 node-1/1
echo PASS
