#!/usr/bin/env bash
# The Python package against the C++ worker: from the same TorchScript initial model, data,
# data order and spec (2 nodes, local_sgd_steps 4, 2 micro-batches per optimizer step), a run
# of two C++ workers and a run of two Python ranks (the worker's training loop written in
# Python, with localsgd.LocalSGD) end on the same final model (fp32, within 1e-6 relative),
# and both count optimizer steps, not micro-batches: 40 steps are 10 rounds.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
echo -n "equality-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"
PY=/usr/bin/python3
export PYTHONPATH="$BIN/python" OMP_NUM_THREADS=1

# The initial model and the data (a random teacher's 4 classes of 20-feature inputs).
$PY - "$WORK" <<'PYTHON' || fail "writing the model and the data failed"
import sys, torch
work = sys.argv[1]
torch.manual_seed(3)
net = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
torch.jit.script(net).save(f"{work}/model.pt")
x = torch.randn(1024, 20)
torch.save({"inputs": x, "targets": x.mm(torch.randn(20, 4)).argmax(1)}, f"{work}/data.pt")
PYTHON

start_coordinator --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 --token_file="$WORK/token"
spec() {  # NAME
  cat <<SPEC
name: "$1"
model { torchscript_path: "$WORK/model.pt" }
dataset { kind: DATASET_KIND_TENSOR_FILE path: "$WORK/data.pt" }
local_sgd_steps: 4
gradient_accumulation_steps: 2
total_steps: 40
batch_size: 32
seed: 11
optimizer { lr: 0.1 momentum: 0.5 }
min_workers: 2
SPEC
}
ctl() { "$BIN/coordinator/localsgdctl" --coordinator="$GRPC" --token_file="$WORK/token" "$@"; }

# 1. The C++ worker.
spec cpp | start_run
for node in 0 1; do
  "$BIN/worker/worker" --coordinator="$GRPC" --token_file="$WORK/token" --node_name="node-$node" \
    --node_rank=$node --num_nodes=2 --threads=1 --rendezvous_dir="$WORK" \
    --checkpoint_dir="$WORK/checkpoints" >"$WORK/w$node.out" 2>"$WORK/w$node.err" &
  pids+=($!)
  workers+=($!)
done
for p in "${workers[@]}"; do wait "$p" || fail "worker $p failed"; done
wait_status 'run["state"] == "RUN_STATE_COMPLETED" and run["global_step"] == 40 and
             len(committed) == 10' "the C++ run did not complete in 10 rounds" 30
ctl fetch --out="$WORK/cpp.bin" >/dev/null || fail "fetching the C++ run's model failed"

# 2. The same loop in Python: the worker's data split and order, optimizer and loss.
spec python | start_run
workers=()
for node in 0 1; do
  RANK=$node WORLD_SIZE=2 LOCALSGD_NODE_NAME="py-$node" LOCALSGD_COORDINATOR="$GRPC" \
    LOCALSGD_TOKEN_FILE="$WORK/token" LOCALSGD_RENDEZVOUS_DIR="$WORK" \
    LOCALSGD_CHECKPOINT_DIR="$WORK/checkpoints" $PY - "$WORK" <<'PYTHON' \
    >"$WORK/p$node.out" 2>"$WORK/p$node.err" &
import sys, torch, torch.nn.functional as F
import localsgd
torch.set_num_threads(1)
work = sys.argv[1]
model = torch.jit.load(f"{work}/model.pt")
model.train()
with localsgd.LocalSGD(model=model, local_sgd_steps=4) as local_sgd:
    spec = local_sgd.spec
    data = torch.load(f"{work}/data.pt")
    x, y = data["inputs"][local_sgd.rank::local_sgd.world_size], data["targets"][local_sgd.rank::local_sgd.world_size]
    optimizer = torch.optim.SGD(model.parameters(), lr=spec["optimizer"]["lr"],
                                momentum=spec["optimizer"]["momentum"])
    batch, accumulation = spec["batch_size"], spec["gradient_accumulation_steps"]
    torch.manual_seed((spec["seed"] * 1000003 + local_sgd.rank) % 2**64)
    order, cursor = torch.randperm(len(x)), 0
    while local_sgd.steps < spec["total_steps"]:
        for _ in range(accumulation):
            if cursor + batch > len(x):
                order, cursor = torch.randperm(len(x)), 0
            idx = order[cursor:cursor + batch]
            cursor += batch
            (F.cross_entropy(model(x[idx]), y[idx]) / accumulation).backward()
        optimizer.step()
        optimizer.zero_grad()
        local_sgd.step()
    print(f"{local_sgd.steps} steps, {local_sgd.syncs} syncs")
PYTHON
  pids+=($!)
  workers+=($!)
done
for p in "${workers[@]}"; do wait "$p" || fail "python rank $p failed"; done
grep -q "40 steps, 10 syncs" "$WORK/p0.out" || fail "the Python rank did not sync 10 times in 40 steps"
wait_status 'run["spec"]["name"] == "python" and run["state"] == "RUN_STATE_COMPLETED" and
             run["global_step"] == 40 and len(committed) == 10' \
  "the Python run did not complete in 10 rounds" 30
ctl fetch --out="$WORK/python.bin" >/dev/null || fail "fetching the Python run's model failed"

$PY - "$WORK" <<'PYTHON' || fail "the final models differ"
import os, sys, torch
work = sys.argv[1]
def load(name):
    path = f"{work}/{name}.bin"
    return torch.from_file(path, size=os.path.getsize(path) // 4, dtype=torch.float32)
cpp, python = load("cpp"), load("python")
first = torch.cat([p.reshape(-1) for p in torch.jit.load(f"{work}/model.pt").parameters()])
distance = ((cpp - python).norm() / cpp.norm()).item()
moved = ((cpp - first).norm() / first.norm()).item()
print(f"C++ and Python final models: relative distance {distance:.3g} (training moved it {moved:.3g})")
assert distance <= 1e-6 and moved > 1e-2, (distance, moved)
PYTHON
echo PASS
