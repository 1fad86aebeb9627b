#!/usr/bin/env bash
# A non-leader rank SIGKILLed during training: its node's other ranks notice at their next
# collective (well within the lease timeout), re-form their group with the ranks left (local
# ranks 0 and 2, renumbered 0 and 1), and go on: the node leader takes part in the following
# rounds with the new weight (2 ranks), every surviving replica holds the same parameters after
# every round, the run completes and the synthetic task reaches its accuracy. Two nodes x three
# ranks, real processes.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "rank-death-token" > "$WORK/token"
mkdir -p "$WORK/dump"
source "$BIN/tests/testutil/test_helpers.sh"

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 \
  --token_file="$WORK/token" --lease_timeout=8s --heartbeat_interval=1s

start_workers 2 3 --log_every=50
start_run <<SPEC
model { builtin: "mlp" }
dataset { synthetic_samples: 4096 }
local_sgd_steps: 4
total_steps: 400
batch_size: 32
min_workers: 4
round_deadline_seconds: 5
optimizer { lr: 0.05 momentum: 0.9 }
SPEC

for _ in $(seq 1 900); do [[ $(committed_rounds) -ge 8 ]] && break; sleep 0.1; done
[[ $(committed_rounds) -ge 8 ]] || fail "no 8 rounds before the kill"
killed_at=$(date +%s.%N)
kill -9 "${worker_pids[01]}"
wait "${worker_pids[01]}" 2>/dev/null || true

for w in 00 02 10 11 12; do wait "${worker_pids[$w]}" || fail "worker $w failed"; done
status=$("$BIN/coordinator/localsgdctl" --coordinator="$GRPC" status)
grep -q "COMPLETED" <<<"$status" || fail "run not completed: $status"
for r in 0 2; do
  grep -q "local rank(s) 1 gone; going on with local ranks 0, 2" "$WORK/w0$r.err" \
    || fail "node-0 rank $r did not re-form without rank 1"
done
grep -q "worker node-0/1 lease expired" "$WORK/coord.err" \
  || fail "the coordinator did not expire the killed rank"
# After the kill every round still has both node leaders.
if sed -n '/node-0\/1 lease expired/,$p' "$WORK/coord.err" | grep " committed: " \
    | grep -v "committed: 2 of 2 members (node-0/0, node-1/0)" >&2; then
  fail "a round after the kill went without node-0's leader"
fi

/usr/bin/python3 - "$WORK" "$killed_at" <<'PY' || fail "check failed"
import datetime, glob, os, re, sys
import numpy as np
work, killed_at = sys.argv[1], float(sys.argv[2])
survivors = ["node-0-0", "node-0-2", "node-1-0", "node-1-1", "node-1-2"]
failed = set()
for log in glob.glob(f"{work}/w*.err"):
    failed |= {int(s) for s in re.findall(r"sync at step (\d+):", open(log).read())}
def dump(worker, step, kind):
    path = f"{work}/dump/{worker}-{step}-{kind}.bin"
    return np.fromfile(path, dtype=np.float32) if os.path.exists(path) else None
steps = sorted({int(os.path.basename(p).split("-")[3]) for p in glob.glob(f"{work}/dump/*-post.bin")})
checked = 0
for step in steps:
    if step in failed:
        continue
    posts = [dump(w, step, "post") for w in survivors]
    posts = [p for p in posts if p is not None]
    assert len(posts) == len(survivors), f"step {step}: {len(posts)} survivors synced"
    assert all(np.array_equal(posts[0], p) for p in posts), f"survivors differ after step {step}"
    checked += 1
rounds = len(re.findall(" committed: ", open(f"{work}/coord.err").read()))
assert checked >= rounds - 2, f"only {checked} of {rounds} rounds identical on all survivors"

# node-0 noticed within the lease timeout (8 s) of the kill.
line = re.search(r"^(\S+) W node group generation 1: local rank\(s\) 1 gone",
                 open(f"{work}/w00.err").read(), re.M).group(1)
noticed = datetime.datetime.strptime(line, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
    tzinfo=datetime.timezone.utc).timestamp() - killed_at
assert 0 <= noticed < 8, f"re-formed {noticed:.1f} s after the kill"

# The last round: node-0's delta weighs 2 ranks now. With plain averaging the global is
# (2 * mean(node-0's 2 ranks) + 3 * mean(node-1's 3 ranks)) / 5; with the old weight (3) it
# would be (m0 + m1) / 2.
step = steps[-1]
m0 = np.mean([dump(w, step, "pre") for w in survivors[:2]], axis=0, dtype=np.float64)
m1 = np.mean([dump(w, step, "pre") for w in survivors[2:]], axis=0, dtype=np.float64)
post = dump("node-0-0", step, "post").astype(np.float64)
right = np.abs(post - (2 * m0 + 3 * m1) / 5).max()
wrong = np.abs(post - (m0 + m1) / 2).max()
assert right < 1e-5 and wrong > 10 * right, f"weights: error {right:g} (old weight: {wrong:g})"
print(f"re-formed {noticed:.2f} s after the kill; {checked} of {rounds} rounds identical on "
      f"the 5 survivors; last round weighs node-0 as 2 ranks (error {right:.1e} vs {wrong:.1e})")
PY

expect_accuracy 0.6 "$WORK"/w00.out "$WORK"/w02.out "$WORK"/w10.out
echo PASS
