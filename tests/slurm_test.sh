#!/usr/bin/env bash
# The sbatch script on a real single-node Slurm cluster (Debian's slurm-wlm and munge, daemons
# started here, configured in a temporary folder): the job runs the coordinator and one
# worker per task, the run completes, and every round has every node leader and drops nobody.
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
  exit 1
}
[[ $(id -u) -eq 0 ]] || fail "needs root to run slurmd"
cleanup() { "$ROOT/deploy/slurm/single_node_cluster.sh" stop "$CLUSTER"; rm -rf "$CLUSTER"; }
trap cleanup EXIT
env_line=$("$ROOT/deploy/slurm/single_node_cluster.sh" start "$CLUSTER") || fail "cluster did not start"
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
  timeout 600 sbatch --wait --nodes=1 --ntasks-per-node=2 --chdir="$WORK" --output="$WORK/job.out" \
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
assert len(results) == 2 and all(r["step"] == "24" for r in results), results
rounds = status["recent_rounds"]
assert len(rounds) == 6, len(rounds)
for r in rounds:
    assert r["outcome"] == "ROUND_OUTCOME_COMMITTED", r
    assert len(r["members"]) == 1 and r["members"][0].endswith("/0"), r  # the node's leader
    assert not r.get("dropped"), r
print("completed over mutual TLS; 6 rounds, every node leader in each, none dropped; "
      "both workers finished")
PY
[[ -s $(dirname "$status")/model.pt ]] || fail "no trained model"
echo PASS
