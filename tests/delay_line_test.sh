#!/usr/bin/env bash
# The harness's round trips (deploy/netns/hosts.sh with a DELAY, held by the delay line):
# hosts 25 ms apart each way measure a 50 ms round trip within 10 %, and carry a TCP stream; one
# far host (2.5 ms + 97.5 ms) is 100 ms from the near ones while those stay close; `down` leaves
# no process behind. Skips, saying why, where the kernel or the machine has no NFQUEUE.
set -euo pipefail

BIN="$TEST_SRCDIR/$TEST_WORKSPACE"
WORK="$TEST_TMPDIR"
PREFIX="dl$$"
PREFIX=${PREFIX:0:8}
HOSTS="$BIN/deploy/netns/hosts.sh"
PROBE="$BIN/tests/link_probe.py"
source "$BIN/tests/testutil/test_helpers.sh"
trap '"$HOSTS" down "$PREFIX" 3' EXIT
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for ip netns and iptables"; exit 0; }
command -v iptables >/dev/null || { echo "SKIP: no iptables"; exit 0; }

# Prints "rtt_ms=R mbit_s=M" for the link from host FROM to host TO.
probe() {  # FROM TO MB
  ip netns exec "$PREFIX-h$2" /usr/bin/python3 "$PROBE" serve 7000 >/dev/null 2>&1 &
  local server=$!
  pids+=("$server")
  sleep 0.5
  ip netns exec "$PREFIX-h$1" timeout 120 /usr/bin/python3 "$PROBE" probe "10.77.0.$(($2 + 1))" 7000 \
    --mb "$3" || fail "probe from host $1 to host $2"
  kill "$server" 2>/dev/null || true
}
field() {  # NAME LINE: the value of NAME=... in a probe's line
  sed "s/.*$1=\([0-9.]*\).*/\1/" <<<"$2"
}
near() {  # VALUE TARGET: within 10 %
  /usr/bin/python3 -c "import sys; v, t = map(float, sys.argv[1:]); sys.exit(abs(v - t) > 0.1 * t)" "$1" "$2"
}

if ! "$HOSTS" up "$PREFIX" 2 400mbit 25ms 2>"$WORK/up.err"; then
  if grep -q "binding queue" "$WORK/up.err"; then
    echo "SKIP: no NFQUEUE here: $(cat "$WORK/up.err")"
    exit 0
  fi
  fail "hosts.sh up: $(cat "$WORK/up.err")"
fi
line=$(probe 0 1 100)
echo "25 ms each way, 400 Mbit/s: $line"
rtt=$(field rtt_ms "$line")
rate=$(field mbit_s "$line")
near "$rtt" 50 || fail "round trip $rtt ms, not 50 ms within 10 %"
/usr/bin/python3 -c "import sys; sys.exit(float(sys.argv[1]) < 50)" "$rate" ||
  fail "one stream carried only $rate Mbit/s"

# One far site: hosts 0 and 1 near (2.5 ms each), host 2 far (97.5 ms).
"$HOSTS" up "$PREFIX" 3 200mbit 2.5,2.5,97.5 || fail "hosts.sh up with a far host"
far=$(probe 0 2 10)
close=$(probe 0 1 10)
echo "far host: $far; near hosts: $close"
far_rtt=$(field rtt_ms "$far")
close_rtt=$(field rtt_ms "$close")
near "$far_rtt" 100 || fail "far round trip $far_rtt ms, not 100 ms within 10 %"
/usr/bin/python3 -c "import sys; sys.exit(float(sys.argv[1]) > 15)" "$close_rtt" ||
  fail "near round trip $close_rtt ms, not about 5 ms"

lines=$(cat /run/localsgd-netns/"$PREFIX"/h*.pid)
[[ $(wc -w <<<"$lines") -eq 3 ]] || fail "not one delay line per host: $lines"
"$HOSTS" down "$PREFIX" 3
for pid in $lines; do
  kill -0 "$pid" 2>/dev/null && fail "delay line $pid left behind"
done
[[ -e /run/localsgd-netns/$PREFIX ]] && fail "state folder left behind"
echo PASS
