#!/usr/bin/env bash
# Workers given bad input fail with one clear line naming the file or flag, exit non-zero,
# and leave no half-joined member in the coordinator. A run whose only worker failed so
# before training fails at once, with the worker's error as its reason.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "bad-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 --token_file="$WORK/token"
ctl() { "$BIN/coordinator/localsgdctl" --coordinator="$GRPC" --token_file="$WORK/token" "$@"; }
worker() { "$BIN/worker/worker" --coordinator="$GRPC" --token_file="$WORK/token" \
  --node_name=node-0 --connect_timeout=5s --rendezvous_dir="$WORK" "$@"; }

expect_failure() {  # message, then the spec (or "" for flag checks), then worker flags
  local message=$1 spec=$2; shift 2
  if [[ -n "$spec" ]]; then
    echo "$spec" > "$WORK/spec.textproto"
    ctl start --spec="$WORK/spec.textproto" >/dev/null
  fi
  local out rc=0
  out=$(worker "$@" 2>&1) || rc=$?
  [[ $rc -ne 0 ]] || fail "worker succeeded; expected: $message"
  grep -qF -- "$message" <<<"$out" || fail "expected \"$message\" in: $out"
  members=$(curl -fsS "http://$HTTP/metrics" | sed -n 's/^localsgd_members //p')
  [[ "$members" == "0" ]] || fail "a half-joined member is left after: $message"
  if [[ -n "$spec" ]]; then
    run=$(ctl status --json)
    grep -qF '"state": "RUN_STATE_FAILED"' <<<"$run" || fail "the run did not fail: $run"
    grep -qF "every worker failed before training: node-0/0: failed: " <<<"$run" \
      || fail "the run's reason does not name the worker's error: $run"
    grep -qF -- "$message" <<<"$run" || fail "the run's reason lacks \"$message\": $run"
  fi
}

# Flag errors are usage errors: exit 2.
for flags in "--device=cuda:7" "--local_rank=2 --local_world_size=2" "--no_such_flag" \
  "--threads=-1"; do
  rc=0
  # shellcheck disable=SC2086
  out=$(worker $flags 2>&1) || rc=$?
  [[ $rc == 2 ]] || fail "worker $flags: exit $rc, not 2: $out"
done
rc=0
out=$(worker --help 2>&1) || rc=$?
[[ $rc == 0 ]] || fail "worker --help: exit $rc"
grep -qF -- "--tls_ca" <<<"$out" || fail "worker --help does not show the TLS flags"

expect_failure "--device: cuda:7 does not exist" "" --device=cuda:7
expect_failure "--device: \"tpu\" is not a device" "" --device=tpu
expect_failure "--local_rank must be in" "" --local_rank=2 --local_world_size=2
expect_failure "--threads must be 0 (automatic) or more" "" --threads=-1
expect_failure "--ranks_from_environment: neither srun's SLURM_PROCID nor torchrun's RANK is set" \
  "" --ranks_from_environment
SLURM_PROCID=5 SLURM_NTASKS=5 SLURM_LOCALID=0 SLURM_NODEID=1 SLURM_TASKS_PER_NODE=4,1 \
  expect_failure "--ranks_from_environment: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_TASKS_PER_NODE: rank 5 must be in [0, world size 5)" \
  "" --ranks_from_environment
expect_failure "model.torchscript_path: cannot open /nonexistent/net.pt" \
  'model { torchscript_path: "/nonexistent/net.pt" }'
echo "not a module" > "$WORK/garbage.pt"
expect_failure "is not a TorchScript module" "model { torchscript_path: \"$WORK/garbage.pt\" }"
expect_failure "dataset.path: cannot open /nonexistent/fmnist/train-images-idx3-ubyte" \
  'model { builtin: "mlp" } dataset { kind: DATASET_KIND_FASHION_MNIST path: "/nonexistent/fmnist" }'
expect_failure "dataset.path: $WORK/garbage.pt: not a tensor file" \
  "model { builtin: \"mlp\" } dataset { kind: DATASET_KIND_TENSOR_FILE path: \"$WORK/garbage.pt\" }"
# A TorchScript model that does not fit the data throws from LibTorch on its first step: the
# worker reports the error and leaves (issue 37, finding 8; it used to abort with exit 134).
cat > "$WORK/make_net.py" <<'PY'
import sys, torch
class Net(torch.nn.Module):
  def __init__(self):
    super().__init__()
    self.fc = torch.nn.Linear(100, 10)
  def forward(self, x):
    return self.fc(x.reshape(x.shape[0], -1))
torch.jit.script(Net()).save(sys.argv[1])
PY
/usr/bin/python3 "$WORK/make_net.py" "$WORK/wrong_shape.pt"
expect_failure "training failed: mat1 and mat2 shapes cannot be multiplied" \
  "model { torchscript_path: \"$WORK/wrong_shape.pt\" } dataset { synthetic_samples: 256 }"
echo PASS
