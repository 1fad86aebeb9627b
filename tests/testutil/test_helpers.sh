# Sourced by the shell tests in tests/: process bookkeeping, failure reports and a coordinator
# started on real ports. Needs BIN (the runfiles root) and WORK (the test's scratch folder).

pids=()
kill_started() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap kill_started EXIT

# Prints the message and the tails of the logs in $WORK, and fails the test.
fail() {
  echo "FAIL: $*" >&2
  for f in "$WORK"/*.out "$WORK"/*.err; do
    [[ -f "$f" ]] && { echo "== $f"; tail -n 20 "$f"; } >&2
  done
  exit 1
}
# Bazel's timeout (SIGTERM) reports the logs as a failure does: a test that hangs says where.
trap 'fail "timed out (SIGTERM) with its processes still running"' TERM

# Starts the coordinator with the given flags (prefixed by the command in COORDINATOR_HOST,
# e.g. "ip netns exec NS", when set), logging to $WORK/coord.out and coord.err, and waits for
# its listening lines. Sets coord_pid, GRPC and HTTP (the real addresses).
start_coordinator() {
  # Emptied here, before the background start, so that the wait below never reads the lines of
  # an earlier coordinator of the same test (a restart).
  : >"$WORK/coord.out"
  ${COORDINATOR_HOST:-} "$BIN/coordinator/coordinator" "$@" >"$WORK/coord.out" 2>"$WORK/coord.err" &
  coord_pid=$!
  pids+=("$coord_pid")
  for _ in $(seq 1 600); do  # up to 60 s: sanitizer builds on a loaded machine start slowly
    grep -q '^http listening on ' "$WORK/coord.out" && break
    kill -0 "$coord_pid" 2>/dev/null || fail "coordinator exited"
    sleep 0.1
  done
  GRPC=$(sed -n 's/^grpc listening on //p' "$WORK/coord.out")
  HTTP=$(sed -n 's/^http listening on //p' "$WORK/coord.out")
  [[ -n "$GRPC" && -n "$HTTP" ]] || fail "coordinator did not print its listening lines"
}

# A TCP port free on the loopback address now (for programs that take a fixed port).
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The coordinator's /status, asked through tests/testutil/status_query.py (its docstring names
# what an expression may use: run, rounds, committed, members, results, events(), ...).
status_query() {
  ${COORDINATOR_HOST:-} /usr/bin/python3 "$BIN/tests/testutil/status_query.py" "$HTTP" "$@"
}

# Waits up to SECONDS (default 60) until the Python EXPRESSION over /status holds; fails the
# test with MESSAGE (and a summary of the status) otherwise.
wait_status() {  # EXPRESSION MESSAGE [SECONDS]
  status_query "$1" --wait "${3:-60}" || fail "$2"
}

# Fails the test with MESSAGE unless EXPRESSION holds now.
expect_status() { wait_status "$1" "$2" 0; }

# Prints the value of EXPRESSION (JSON).
status_value() { status_query "$1" --print; }

# Rounds the coordinator has committed since it started.
committed_rounds() { status_value 's["rounds_committed_total"]'; }

# Fails unless each worker given (a worker id) reported a final test accuracy above MIN.
expect_accuracy() {  # MIN WORKER_ID...
  local min=$1 worker
  shift
  for worker in "$@"; do
    expect_status "results['$worker']['test_accuracy'] > $min" \
      "$worker: no final test accuracy above $min"
  done
}

# Starts a run from the spec text on standard input through localsgdctl (needs GRPC and
# $WORK/token; extra arguments go to localsgdctl before the command).
start_run() {
  cat > "$WORK/spec.textproto"
  "$BIN/coordinator/localsgdctl" --coordinator="$GRPC" --token_file="$WORK/token" "$@" start \
    --spec="$WORK/spec.textproto" >/dev/null || fail "localsgdctl start failed"
}

# Starts NODES x RANKS workers (node-<n>, local ranks 0..RANKS-1) against $GRPC with the node's
# rendezvous and dumps in $WORK, then any extra worker flags; worker <n>/<r> logs to
# $WORK/w<n><r>.out and .err and its pid is in worker_pids[<n><r>] (and in workers, in order).
declare -A worker_pids
workers=()
# Starts `nodes` x `ranks` dumping workers with the given flags (and node n's ranks with the
# words of node_flags[n], when that array is set).
start_workers() {
  local nodes=$1 ranks=$2 node rank
  shift 2
  for ((node = 0; node < nodes; node++)); do
    for ((rank = 0; rank < ranks; rank++)); do
      "$BIN/tests/testutil/dumping_worker" --coordinator="$GRPC" --token_file="$WORK/token" \
        --node_name="node-$node" --node_rank=$node --num_nodes="$nodes" --local_rank=$rank \
        --local_world_size="$ranks" --rendezvous_dir="$WORK" --dump_dir="$WORK/dump" "$@" \
        ${node_flags[$node]:-} \
        >"$WORK/w$node$rank.out" 2>"$WORK/w$node$rank.err" &
      pids+=($!)
      workers+=($!)
      worker_pids[$node$rank]=$!
    done
  done
}
