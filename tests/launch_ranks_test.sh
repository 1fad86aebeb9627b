#!/usr/bin/env bash
# deploy/bin/launch-ranks: {rank} substituted, torchrun's variables, the first failure's status, SIGTERM forwarded
# to every rank, usage errors exit 2.
set -euo pipefail
LAUNCH="$TEST_SRCDIR/$TEST_WORKSPACE/deploy/bin/launch-ranks"
WORK="$TEST_TMPDIR"
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$LAUNCH" 3 sh -c 'echo "rank {rank} of 3"')
for rank in 0 1 2; do grep -q "rank $rank of 3" <<<"$out" || fail "rank $rank did not run: $out"; done
# torchrun's variables: node 1 of 2.
out=$(NODE_RANK=1 NNODES=2 "$LAUNCH" 2 sh -c \
  'echo "$LOCAL_RANK/$LOCAL_WORLD_SIZE $RANK/$WORLD_SIZE $GROUP_RANK"')
for line in "0/2 2/4 1" "1/2 3/4 1"; do
  grep -qx "$line" <<<"$out" || fail "torchrun's variables: no \"$line\" in: $out"
done
rc=0
NODE_RANK=2 NNODES=2 "$LAUNCH" 1 true 2>/dev/null || rc=$?
[[ $rc == 2 ]] || fail "NODE_RANK 2 of NNODES 2 gave $rc, not 2"

# The first rank to fail gives the status; the others are waited for.
rc=0
# (Ranks 0 and 2 finish only after rank 1 has failed.)
"$LAUNCH" 3 sh -c 'if [ {rank} = 1 ]; then touch "$0.failed"; exit 7; fi
  while [ ! -e "$0.failed" ]; do sleep 0.1; done; touch "$0.{rank}"' "$WORK/done" \
  2>"$WORK/err" || rc=$?
[[ $rc == 7 ]] || fail "a failed rank gave $rc, not 7"
[[ -e "$WORK/done.0" && -e "$WORK/done.2" ]] || fail "the other ranks were not waited for"
grep -q "exited 7" "$WORK/err" || fail "the failure is not reported: $(cat "$WORK/err")"

# SIGTERM reaches every rank; the launcher exits with their status (143). Each rank says it
# is ready once its handler is in place.
"$LAUNCH" 2 sh -c 'trap "echo {rank} >> $0; exit 143" TERM; touch "$0.ready.{rank}"
  while :; do sleep 0.1; done' "$WORK/terms" 2>/dev/null &
launcher=$!
for _ in $(seq 1 100); do
  [[ -e "$WORK/terms.ready.0" && -e "$WORK/terms.ready.1" ]] && break
  sleep 0.1
done
[[ -e "$WORK/terms.ready.0" && -e "$WORK/terms.ready.1" ]] || fail "the ranks did not start"
kill -TERM "$launcher"
rc=0
wait "$launcher" || rc=$?
[[ $rc == 143 ]] || fail "SIGTERM: exit $rc, not 143"
[[ $(sort "$WORK/terms" | tr '\n' ' ') == "0 1 " ]] || fail "not every rank got SIGTERM: $(cat "$WORK/terms")"

# SIGTERM while the ranks exit together: the launcher waits for them and exits within 2 s,
# 50 times in 50 (issue 49: it spun at full CPU on a rank bash had already reaped, "wait: PID:
# no such job", in 8 of 10 tries).
for try in $(seq 1 50); do
  "$LAUNCH" 3 sleep 30 2>"$WORK/spin.err" &
  launcher=$!
  sleep 0.$((try % 4 + 1))
  kill -TERM "$launcher"
  for _ in $(seq 1 20); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$launcher" 2>/dev/null; then
    kill -KILL "$launcher"
    fail "try $try: the launcher still runs 2 s after SIGTERM: $(head -c 300 "$WORK/spin.err")"
  fi
  rc=0
  wait "$launcher" || rc=$?
  [[ $rc == 143 ]] || fail "try $try: SIGTERM with sleeping ranks: exit $rc, not 143"
  ! grep -q "no such job" "$WORK/spin.err" || fail "try $try: $(head -c 300 "$WORK/spin.err")"
done

rc=0
"$LAUNCH" 2>/dev/null || rc=$?
[[ $rc == 2 ]] || fail "no arguments: exit $rc"
echo PASS
