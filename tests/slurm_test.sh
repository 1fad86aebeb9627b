#!/usr/bin/env bash
# The sbatch script on a real two-node Slurm cluster (Debian's slurm-wlm and munge, a slurmd per
# node, daemons started here, configured in a temporary folder): a job with uneven tasks per
# node (5 on 2 nodes) runs the coordinator and one worker per task, the run completes, and every
# round has both node leaders and drops nobody; a spec asking for more workers than the job has
# tasks is refused; a job that requeues itself near its time limit (the USR1 of --signal), and
# is then requeued from outside (what preemption does), carries the same run on to completion
# in one appended output file.
set -euo pipefail

ROOT="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
# Short: munge's socket path must fit in 108 bytes, and TEST_TMPDIR is deep.
CLUSTER=$(mktemp -d /tmp/lsgd-slurm.XXXXXX)
fail() {
  echo "FAIL: $*" >&2
  for f in "$WORK"/job.out "$WORK"/localsgd-*/coordinator.log "$CLUSTER"/slurmctld.log "$CLUSTER"/slurmd.log; do
    [[ -f "$f" ]] && { echo "== $f"; tail -30 "$f"; } >&2
  done
  # A job still pending says why (e.g. a node with too few CPUs for its tasks).
  [[ -n ${SLURM_CONF:-} ]] && { echo "== squeue"; squeue -h -o "%i %T %r" 2>&1; } >&2
  exit 1
}
[[ $(id -u) -eq 0 ]] || fail "needs root to run slurmd"
cleanup() { "$ROOT/deploy/slurm/local_cluster.sh" stop "$CLUSTER"; rm -rf "$CLUSTER"; }
trap cleanup EXIT
env_line=$("$ROOT/deploy/slurm/local_cluster.sh" start "$CLUSTER" 2) || fail "cluster did not start"
eval "$env_line"

cat > "$WORK/spec.textproto" <<SPEC
name: "slurm-test"
model { builtin: "mlp" }
dataset { synthetic_samples: 2048 }
local_sgd_steps: 4
total_steps: 24
batch_size: 32
min_workers: 1
SPEC
# No LOCALSGD_PORT: the job's coordinator picks free ports and says which.
LOCALSGD_BIN="$ROOT" LOCALSGD_SPEC="$WORK/spec.textproto" LOCALSGD_DIR="$WORK" \
  timeout 300 sbatch --wait --nodes=2 --ntasks=5 --chdir="$WORK" --output="$WORK/job.out" \
  "$ROOT/deploy/slurm/localsgd.sbatch" >/dev/null || fail "the job failed"

grep -Eq "^coordinator [^ ]+:[1-9][0-9]*, status http://[^ ]+:[1-9][0-9]*/" "$WORK/job.out" \
  || fail "the job does not say where its coordinator listens"
status=$(ls "$WORK"/localsgd-*/status.json)
/usr/bin/python3 - "$status" <<'PY' || fail "round check failed"
import json, sys
status = json.load(open(sys.argv[1]))
run = status["run"]
assert run["state"] == "RUN_STATE_COMPLETED" and run["global_step"] == "24", run
assert status["transport_security"] == "mutual TLS" and status["token_required"], status
results = run["member_results"]
assert len(results) == 5 and all(r["step"] == "24" for r in results), results
# Uneven: both nodes, their ranks numbered 0.. on each, 5 in all; min_workers raised to 5.
nodes = {}
for r in results:
    node, rank = r["worker_id"].split("/")
    nodes.setdefault(node, []).append(int(rank))
counts = sorted(len(ranks) for ranks in nodes.values())
assert sorted(nodes) == ["n1", "n2"] and counts in ([1, 4], [2, 3]), nodes
assert all(sorted(ranks) == list(range(len(ranks))) for ranks in nodes.values()), nodes
assert run["spec"]["min_workers"] == 5, run["spec"]
rounds = status["recent_rounds"]
assert len(rounds) == 6, len(rounds)
for r in rounds:
    assert r["outcome"] == "ROUND_OUTCOME_COMMITTED", r
    # Both node leaders, and nobody else.
    assert sorted(m.split("/")[0] for m in r["members"]) == ["n1", "n2"], r
    assert all(m.endswith("/0") for m in r["members"]), r
    assert not r.get("dropped"), r
print(f"completed over mutual TLS on 2 nodes with {counts} ranks; 6 rounds, both "
      "node leaders in each, none dropped; all 5 workers finished")
PY
[[ -s $(dirname "$status")/model.pt ]] || fail "no trained model"

# A spec that wants more workers than the job has tasks is refused before anything starts.
sed 's/^min_workers: .*/min_workers: 9/' "$WORK/spec.textproto" > "$WORK/too_many.textproto"
if LOCALSGD_BIN="$ROOT" LOCALSGD_SPEC="$WORK/too_many.textproto" LOCALSGD_DIR="$WORK/too_many" \
  timeout 120 sbatch --wait --nodes=1 --ntasks=2 --chdir="$WORK" --output="$WORK/too_many.out" \
  "$ROOT/deploy/slurm/localsgd.sbatch" >/dev/null 2>&1; then
  fail "a job whose spec wants 9 workers on 2 tasks succeeded"
fi
grep -q "min_workers 9 is more than this job's 2 tasks" "$WORK/too_many.out" \
  || fail "the refused job does not say why: $(cat "$WORK/too_many.out")"

# Requeue: the job is stopped in the middle of its run and started again with the same job id,
# and so the same folder; its coordinator restores the run from the state folder, `localsgdctl
# start --if_absent` attaches to it, the workers resume from its global model, and the job
# completes that same run. First the job requeues itself, as near its time limit (--signal
# sends the batch script USR1), then it is requeued from outside, as by preemption or a node
# failure.
sed -e 's/^name: .*/name: "slurm-requeue"/' -e 's/^total_steps: .*/total_steps: 1200/' \
  "$WORK/spec.textproto" > "$WORK/requeue.textproto"
mkdir -p "$WORK/requeue"
job=$(LOCALSGD_BIN="$ROOT" LOCALSGD_SPEC="$WORK/requeue.textproto" LOCALSGD_DIR="$WORK/requeue" \
  sbatch --parsable --nodes=1 --ntasks-per-node=2 --chdir="$WORK" \
  --output="$WORK/requeue.out" "$ROOT/deploy/slurm/localsgd.sbatch") \
  || fail "the requeue job was not submitted"
status_of() {  # ADDRESS ARGS...: the job's coordinator's /status (tests/testutil/status_query.py)
  /usr/bin/python3 "$ROOT/tests/testutil/status_query.py" "$@"
}
coordinator_of_start() {  # N: the address of the job's Nth start's coordinator, once it says
  local address=""
  for _ in $(seq 1 1200); do
    address=$(sed -n 's#^coordinator .*, status http://\([^/]*\)/$#\1#p' "$WORK/requeue.out" \
      2>/dev/null | sed -n "$1p" || true)
    [[ -n $address ]] && break
    sleep 0.1
  done
  echo "$address"
}
address=$(coordinator_of_start 1)
[[ -n $address ]] || fail "the requeue job's coordinator did not start"
status_of "$address" 'run["state"] == "RUN_STATE_RUNNING" and run["round"] >= 3' --wait 120 \
  || fail "the requeue job's run did not get to round 3"
first_run=$(status_of "$address" 'run["run_id"]' --print)
first_round=$(status_of "$address" 'run["round"]' --print)
scancel --batch --signal=USR1 "$job" || fail "scancel --signal=USR1 failed"
address=$(coordinator_of_start 2)
[[ -n $address ]] || fail "the job did not requeue itself on USR1 and start again"
status_of "$address" "run[\"run_id\"] == $first_run and run[\"round\"] >= $first_round + 3" --wait 120 \
  || fail "the self-requeued job did not carry the run on"
scontrol requeue "$job" || fail "scontrol requeue failed"
for _ in $(seq 1 3000); do  # up to 5 minutes
  state=$(scontrol show job "$job" -o | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED ]] && break
  sleep 0.1
done
[[ $state == COMPLETED ]] || fail "the requeued job ended $state"
scontrol show job "$job" -o | grep -q "Restarts=2 " || fail "the job was not requeued twice"
for start in 1 2 3; do
  grep -q "^job $job start $start at" "$WORK/requeue.out" || fail "requeue.out lacks start $start (not appended?)"
done
/usr/bin/python3 - "$WORK/requeue/localsgd-$job/status.json" "$first_run" <<'PY' \
  || fail "the requeued job did not complete the same run"
import json, sys
status = json.load(open(sys.argv[1]))
run, first = status["run"], json.loads(sys.argv[2])
assert run["run_id"] == first, (run["run_id"], first)
assert run["state"] == "RUN_STATE_COMPLETED" and run["global_step"] == "1200", run
restored = [e for e in status["events"] if e["kind"] == "model_restored"]
assert restored, "the restarted coordinator did not restore the run's model"
print(f"run {first} requeued, restored ({restored[0]['text']}) and completed")
PY
echo PASS
