#!/usr/bin/python3
"""What the ring's bytes cost over gRPC and over TCP on loopback, with nothing of localsgd around
them, against localsgd's sharded round and torch.distributed Gloo's all_reduce, in one run.

For each N it runs, on loopback, N processes of //bench:ring_ceiling averaging S MB of fp32 in a
ring (reduce-scatter then all-gather, pipelined chunks, one stream to the next rank): once over
gRPC streaming (raw buffers; localsgd's channel arguments, allocator settings and write
batching) and once over plain TCP; then localsgd's sharded round (bench/averaging_bench.py's: a
coordinator and N averaging_member processes, fp32) and Gloo's all_reduce + divide on the same
S MB. Round times are medians of the rounds after the first, `X@ready` as averaging_bench.py
defines it (from the last member's arrival to the last member's return, how Gloo's round is
timed). CPU is user + system seconds per round of all ranks together, over the rounds after the
first; for localsgd, the members' figure + the coordinator's. Every bare ring checks its
result: max_error is the largest distance of any value from the exact mean.

Usage: /usr/bin/python3 bench/ring_ceiling_bench.py [--nodes 2 4] [--size_mb 100] [--rounds 8]
       [--chunk_kb 128] [--half_bytes] [--no_localsgd]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import re
import socket
import subprocess
import sys
import tempfile

from averaging_bench import gloo_round, localsgd_round
from localsgd_cluster import build, cpu_per_round, member_round_times, outputs_of


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def bare_ring(bin_dir, transport, nodes, size_mb, rounds, chunk_kb):
    """(RoundTimes, CPU seconds per round of all ranks, max_error) of the bare ring."""
    ports = free_ports(nodes)
    ranks = [subprocess.Popen(
        [f"{bin_dir}/bench/ring_ceiling", f"--transport={transport}", f"--rank={r}",
         f"--ranks={nodes}", f"--listen=127.0.0.1:{ports[r]}",
         f"--successor=127.0.0.1:{ports[(r + 1) % nodes]}", f"--values={int(size_mb * 1e6 / 4)}",
         f"--rounds={rounds}", f"--chunk_bytes={chunk_kb * 1024}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(nodes)]
    outputs = outputs_of(ranks, f"ring_ceiling ({transport})", 600)
    error = max(float(re.search(r"max_error (\S+)", o).group(1)) for o in outputs)
    return member_round_times(outputs), cpu_per_round(outputs), error


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--size_mb", type=float, default=100)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--chunk_kb", type=int, default=128)
    parser.add_argument("--half_bytes", action="store_true",
                        help="also run each bare ring on S / 2 MB: a bf16 round's bytes without "
                             "its conversions, so a lower bound on a bf16 ring's round")
    parser.add_argument("--no_localsgd", action="store_true",
                        help="leave out localsgd's sharded round")
    args = parser.parse_args()
    bin_dir = build(["//bench:ring_ceiling", "//coordinator", "//coordinator:localsgdctl",
                     "//tests/testutil:averaging_member"])
    print(f"{'N':>2} {'what':<16} {'round s':>8} {'@ready s':>8} {'CPU s/round':>11} "
          f"{'max_error':>9} {'/gloo':>6} {'@ready/gloo':>11}")
    with tempfile.TemporaryDirectory() as work:
        for nodes in args.nodes:
            rows = []
            for transport in ("grpc", "tcp"):
                times, cpu, error = bare_ring(bin_dir, transport, nodes, args.size_mb,
                                              args.rounds, args.chunk_kb)
                rows.append((f"ring over {transport}", times, f"{cpu:.3f}", f"{error:g}"))
                if args.half_bytes:
                    times, cpu, error = bare_ring(bin_dir, transport, nodes, args.size_mb / 2,
                                                  args.rounds, args.chunk_kb)
                    rows.append(("  half the bytes", times, f"{cpu:.3f}", f"{error:g}"))
            if not args.no_localsgd:
                times, members, coordinator = localsgd_round(
                    bin_dir, work, nodes, args.size_mb, "CODEC_FP32", "EXCHANGE_SHARDED",
                    args.rounds, args.chunk_kb)
                rows.append(("localsgd sharded", times, f"{members:.3f}+{coordinator:.3f}", ""))
            gloo, gloo_cpu = gloo_round(work, nodes, args.size_mb, args.rounds)
            for name, times, cpu, error in rows:
                print(f"{nodes:>2} {name:<16} {times.slowest:>8.4f} {times.ready:>8.4f} "
                      f"{cpu:>11} {error:>9} {times.slowest / gloo:>6.2f} "
                      f"{times.ready / gloo:>11.2f}", flush=True)
            print(f"{nodes:>2} {'gloo all_reduce':<16} {gloo:>8.4f} {'':>8} {gloo_cpu:>11.3f}",
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
