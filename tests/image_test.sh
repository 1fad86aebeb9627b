#!/usr/bin/env bash
# The container images as an operator runs them (deploy/image/build.sh: Debian 12 root file
# systems made with mmdebstrap from Debian's archive, imported into podman): a coordinator
# container with its state on a host folder and two worker containers train a run started
# with localsgdctl; the coordinator container is killed (SIGKILL) mid-run and started again on
# the same folder, and the run completes, still the same run. Skips, saying why, where podman
# cannot run a container.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$(mktemp -d /tmp/localsgd-image-test.XXXXXX)"  # outside the test's folder: podman mounts it
echo -n "image-token" > "$WORK/token"
source "$BIN/tests/testutil/test_helpers.sh"
tag="test-$$"
cleanup() {  # EXIT_CODE
  if [[ $1 != 0 ]]; then  # what the containers said, for the diagnosis
    for c in coord node0 node1; do
      echo "== podman logs $c-$tag (last 30 lines)"
      podman logs --tail 30 "$c-$tag" 2>&1 || true
    done
  fi
  podman rm -f -t 0 "coord-$tag" "node0-$tag" "node1-$tag" >/dev/null 2>&1 || true
  podman rmi -f "localsgd-coordinator:$tag" "localsgd-worker:$tag" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap 'rc=$?; kill_started; cleanup $rc' EXIT

# What this machine's podman needs: runc where cgroups are v1 or hybrid (crun refuses those),
# and limits no higher than this process's own (podman's defaults exceed them here).
run_flags=(--network=host --ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=4096:4096)
runtime=()
if [[ $(podman info --format '{{.Host.CgroupsVersion}}' 2>/dev/null) == v1 ]]; then
  runtime=(--runtime runc)
fi
if ! command -v mmdebstrap >/dev/null || ! command -v podman >/dev/null; then
  echo "SKIPPED: needs mmdebstrap and podman (scripts/setup.sh installs them)"
  exit 0
fi

mkdir -p "$WORK/bin"
cp "$BIN/coordinator/coordinator" "$BIN/coordinator/localsgdctl" "$BIN/worker/worker" \
  "$BIN/deploy/bin/launch-ranks" "$WORK/bin/"
"$BIN/deploy/image/build.sh" --tag "$tag" --bin "$WORK/bin" >"$WORK/build.out" 2>"$WORK/build.err" ||
  fail "building the images failed"
if ! podman "${runtime[@]}" run --rm "${run_flags[@]}" "localsgd-coordinator:$tag" --help \
  >"$WORK/probe.out" 2>&1; then
  grep -q "Usage" "$WORK/probe.out" || {
    echo "SKIPPED: podman cannot run a container here: $(tail -n 1 "$WORK/probe.out")"
    exit 0
  }
fi

mkdir -p "$WORK/state"
chown 65532:65532 "$WORK/state"
chmod 644 "$WORK/token"
grpc_port=$(free_port)
http_port=$(free_port)
GRPC="127.0.0.1:$grpc_port"
HTTP="127.0.0.1:$http_port"
start_coordinator_container() {
  podman "${runtime[@]}" start "coord-$tag" >/dev/null 2>&1 ||
    podman "${runtime[@]}" run -d --name "coord-$tag" "${run_flags[@]}" \
      -v "$WORK/state:/var/lib/localsgd" -v "$WORK/token:/run/localsgd/token:ro" \
      "localsgd-coordinator:$tag" --grpc_address="$GRPC" --http_address="$HTTP" \
      --token_file=/run/localsgd/token --state_dir=/var/lib/localsgd >/dev/null ||
    fail "the coordinator container did not start"
  wait_status 'True' "the coordinator container does not answer on $HTTP" 60
}
start_coordinator_container
for node in 0 1; do
  podman "${runtime[@]}" run -d --name "node$node-$tag" "${run_flags[@]}" \
    -v "$WORK/token:/run/localsgd/token:ro" "localsgd-worker:$tag" --coordinator="$GRPC" \
    --token_file=/run/localsgd/token --node_name="node-$node" --node_rank=$node --num_nodes=2 \
    --threads=1 >/dev/null || fail "worker container $node did not start"
done
start_run <<SPEC
name: "image"
model { builtin: "mlp" }
dataset { kind: DATASET_KIND_FASHION_MNIST path: "/usr/share/datasets/fashion-mnist" }
local_sgd_steps: 8
total_steps: 600
batch_size: 32
min_workers: 2
SPEC
wait_status 'run["state"] == "RUN_STATE_RUNNING" and run["global_step"] >= 80' \
  "the run in containers did not reach step 80" 180
run_id=$(status_value 'run["run_id"]')
podman kill -s KILL "coord-$tag" >/dev/null
podman wait "coord-$tag" >/dev/null 2>&1 || true
start_coordinator_container
wait_status "run['run_id'] == $run_id and run['state'] == 'RUN_STATE_COMPLETED' and
             run['global_step'] == 600" "the run did not complete after the restart" 300
for node in 0 1; do
  [[ $(podman wait "node$node-$tag") == 0 ]] || fail "worker container $node did not exit 0"
done
expect_status 'len(results) == 2 and all(r["test_accuracy"] > 0.7 for r in results.values())' \
  "the workers in containers did not learn"
sizes=$(podman images --format '{{.Repository}} {{.Size}}' --filter "reference=*:$tag" | paste -sd, -)
echo "images: $sizes; run $run_id survived a SIGKILL of its coordinator container and completed" \
  "at step 600; workers' test accuracy:" \
  "$(status_value '", ".join("%.4f" % r["test_accuracy"] for r in results.values())' | tr -d '"')"
echo PASS
