#!/usr/bin/python3
"""What the links themselves allow: raw TCP in the ring's pattern against the all-to-all one,
with the same bytes, in the shaped namespaces of bench/shaped_bench.py.

A sharded round moves the ring's bytes, 2 (N-1)/N S per node leader each way, but as an
all-to-all exchange: each leader's link carries N - 1 or more TCP flows at once. This benchmark
takes localsgd out of the picture: N plain Python processes, one per namespace, each send
2 (N-1)/N S bytes per round over persistent TCP connections, either all of it to the next node
(`ring`: one flow per link and direction, Gloo's pattern) or an equal share to every other
node (`all-to-all`). Round time is the slowest node's time until it sent and received its
round's bytes, median over the rounds after the first; `bound` is 2 (N-1)/N S / bandwidth.
The all-to-all time is the most a sharded round of that schedule can reach over these links,
whatever the implementation.

Usage (root): /usr/bin/python3 bench/tcp_schedule_bench.py [--nodes 2 4 8] [--size_mb 25]
              [--rate 200mbit] [--rounds 5]
"""
import socket
import statistics
import subprocess
import sys
import threading
import time

from localsgd_cluster import Hosts
from shaped_bench import PREFIX, address, host, link_parser, rate_bytes_per_second

PORT = 7100


def node(rank, nodes, schedule, per_round, rounds, start, period):
    """One node: sends and receives `rounds` rounds; prints "round k seconds t" for each."""
    peers = ([(rank + 1) % nodes] if schedule == "ring"
             else [(rank + k) % nodes for k in range(1, nodes)])
    inbound = len(peers)  # both patterns are symmetric
    per_peer = per_round // len(peers)
    received = [[None] * inbound for _ in range(rounds)]
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address(rank + 1), PORT))
    listener.listen(nodes)

    def receive(slot, conn):
        buffer = bytearray(1 << 20)
        for r in range(rounds):
            left = per_peer
            while left > 0:
                got = conn.recv_into(buffer, min(left, len(buffer)))
                if got == 0:
                    raise RuntimeError("a peer closed early")
                left -= got
            received[r][slot] = time.time()

    def accept():
        for slot in range(inbound):
            conn, _ = listener.accept()
            threading.Thread(target=receive, args=(slot, conn), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    connections = []
    for peer in peers:
        while True:
            try:
                connections.append(socket.create_connection((address(peer + 1), PORT)))
                break
            except OSError:
                time.sleep(0.01)
    payload = b"\0" * per_peer

    def send(conn):
        conn.sendall(payload)

    for r in range(rounds):
        begin = start + r * period
        time.sleep(max(0.0, begin - time.time()))
        senders = [threading.Thread(target=send, args=(c,)) for c in connections]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        sent = time.time()
        while None in received[r]:
            time.sleep(0.0005)
        print(f"round {r} seconds {max([sent] + received[r]) - begin:.4f}", flush=True)


def schedule_seconds(nodes, schedule, per_round, rounds, period):
    start = time.time() + 2.0  # every node listening and connected by then
    procs = [subprocess.Popen(host(i + 1) + [sys.executable, __file__, "--node", str(i),
                                             str(nodes), schedule, str(per_round), str(rounds),
                                             str(start), str(period)],
                              stdout=subprocess.PIPE, text=True) for i in range(nodes)]
    per_round_times = {}
    for p in procs:
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"a {schedule} node failed")
        for line in out.splitlines():
            _, r, _, t = line.split()
            per_round_times.setdefault(int(r), []).append(float(t))
    return statistics.median(max(per_round_times[r]) for r in per_round_times if r > 0)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--node":
        rank, nodes, schedule, per_round, rounds, start, period = sys.argv[2:9]
        node(int(rank), int(nodes), schedule, int(per_round), int(rounds), float(start),
             float(period))
        return 0
    parser = link_parser(__doc__, rounds=5)
    args = parser.parse_args()
    bandwidth = rate_bytes_per_second(args.rate)
    print(f"{'N':>2} {'bound s':>8} {'ring s':>8} {'all-to-all s':>12} {'ring/bound':>10} "
          f"{'all-to-all/bound':>16} {'all-to-all/ring':>15}")
    for nodes in args.nodes:
        per_round = int(2 * (nodes - 1) / nodes * args.size_mb * 1e6)
        bound = per_round / bandwidth
        period = 3 * bound + 1.0
        with Hosts(PREFIX, nodes + 1, args.rate):
            ring = schedule_seconds(nodes, "ring", per_round, args.rounds, period)
            all_to_all = schedule_seconds(nodes, "all-to-all", per_round, args.rounds, period)
        print(f"{nodes:>2} {bound:>8.3f} {ring:>8.3f} {all_to_all:>12.3f} {ring / bound:>10.2f} "
              f"{all_to_all / bound:>16.2f} {all_to_all / ring:>15.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
