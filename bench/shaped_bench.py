#!/usr/bin/python3
"""Star and sharded averaging rounds against Gloo all_reduce across shaped links.

For each N it makes N + 1 hosts with deploy/netns/hosts.sh (network namespaces joined through a
bridge, every link shaped with tc tbf to --rate in both directions): the coordinator in host 0
and one node leader (//tests/testutil:averaging_member) in each of hosts 1..N, which syncs S MB of fp32
per round in the star mode and in the sharded mode; then, in the same namespaces, N
torch.distributed processes with the Gloo backend doing all_reduce + divide on the same S MB.
Round times are medians over the measured rounds (the first is a warm-up) of two figures
(localsgd_cluster.member_round_times): `X s`, the slowest member's own round, waiting for the
others to arrive included; `X@ready s`, from the last member's arrival to the last member's
return, which is how the Gloo figure is timed (after a barrier). `bound` is the ring's lower
bound 2 (N-1)/N S / bandwidth; ratios are round time / bound and round time / Gloo.

Usage (root): /usr/bin/python3 bench/shaped_bench.py [--nodes 2 4 8] [--size_mb 25]
              [--rate 200mbit] [--delay 25ms] [--rounds 4] [--chunk_kb 1024 256] [--no_star]
              [--codecs fp32 bf16 int8] [--ring_streams 1 2] [--tuned_tcp]
(--delay: held at each host's ingress, as hosts.sh's DELAY: 25ms makes every round trip 50 ms;
one value per host, comma-separated, puts hosts at different distances; host 0 is the
coordinator's. --ring_streams: the run spec's ring_streams, one sharded row per value.
--tuned_tcp: every host's TCP tuned for long fat pipes (deploy/netns/hosts.sh's TUNED_TCP: a
32 MiB send buffer, no slow start after idle); by default the kernel's settings.)
(--chunk_kb: the run spec's chunk_bytes, one sharded row per size, by default the run's own;
--codecs: the run spec's codec, one sharded row per codec, `@ready/fp32` the round's time
against the fp32 round's at the same chunk size (the bound and Gloo are fp32's);
--no_star: leave the star rounds out, which take minutes at N = 8. `aborts`: sharded round
attempts that aborted and were tried again, warm-up included.)
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

from localsgd_cluster import (Hosts, RoundTimes, build, gloo_worker, member_round_times,
                             outputs_of, start_coordinator)

PREFIX = "lsgds"


def host(i):
    return ["ip", "netns", "exec", f"{PREFIX}-h{i}"]


def address(i):
    return f"10.77.0.{i + 1}"


def exchange_round_seconds(bin_dir, work, nodes, size_mb, exchange, rounds, chunk_kb=None,
                           codec="fp32", ring_streams=1):
    coordinator, _ = start_coordinator(bin_dir, work, prefix=host(0),
                                       listen=f"{address(0)}:50051",
                                       log=open(os.path.join(work, "coordinator.log"), "w"))
    token_file = os.path.join(work, "token")
    try:
        values = int(size_mb * 1e6 / 4)
        members = [subprocess.Popen(
            host(i + 1) + [f"{bin_dir}/tests/testutil/averaging_member",
                           f"--coordinator={address(0)}:50051", "--token=bench-token",
                           f"--node=node-{i}", f"--values={values}", f"--rounds={rounds}",
                           f"--data_address={address(i + 1)}:0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(nodes)]
        spec = os.path.join(work, "spec.textproto")
        with open(spec, "w") as f:
            f.write(f'model {{ builtin: "mlp" }} min_workers: {nodes} round_deadline_seconds: 600 '
                    f'total_steps: 1000000000 exchange: {exchange} codec: CODEC_{codec.upper()}'
                    + (f' chunk_bytes: {chunk_kb * 1024}' if chunk_kb else '')
                    + f' ring_streams: {ring_streams}\n')
        subprocess.run(host(0) + [f"{bin_dir}/coordinator/localsgdctl",
                                  f"--coordinator={address(0)}:50051",
                                  f"--token_file={token_file}", "start", f"--spec={spec}"],
                       check=True, stdout=subprocess.DEVNULL)
        outputs = outputs_of(members, "member", 3600)
        aborts = max(len(re.findall(r"round \d+ aborted", out)) for out in outputs)
        return member_round_times(outputs), aborts
    finally:
        coordinator.terminate()
        coordinator.wait()


def gloo_round_seconds(work, nodes, size_mb, rounds):
    out_path = os.path.join(work, "gloo.txt")
    master = f"{address(1)}:29500"
    procs = [subprocess.Popen(host(i + 1) + [sys.executable, os.path.abspath(__file__),
                                             "--gloo_worker", str(i), str(nodes),
                                             str(int(size_mb * 1e6 / 4)), str(rounds), master,
                                             out_path])
             for i in range(nodes)]
    for p in procs:
        if p.wait(timeout=3600) != 0:
            raise RuntimeError("a Gloo worker failed")
    with open(out_path) as f:
        return statistics.median(float(line) for line in f)


def rate_bytes_per_second(rate):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(k|m|g)bit", rate)
    if not m:
        raise ValueError(f"--rate: {rate} is not like 200mbit")
    return float(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


def link_parser(doc, rounds):
    """The command line every benchmark on these links starts from: nodes, size, rate, rounds."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--size_mb", type=float, default=25)
    parser.add_argument("--rate", default="200mbit")
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--gloo_worker":
        rank, nodes, numel, rounds, master, out_path = sys.argv[2:8]
        gloo_worker(int(rank), int(nodes), int(numel), int(rounds), master, out_path, "eth0")
        return 0
    parser = link_parser(__doc__, rounds=4)
    parser.add_argument("--delay", default="")
    parser.add_argument("--ring_streams", type=int, nargs="+", default=[1])
    parser.add_argument("--tuned_tcp", action="store_true",
                        help="hosts tuned for long fat pipes (deploy/netns/hosts.sh TUNED_TCP)")
    parser.add_argument("--chunk_kb", type=int, nargs="+", default=[None])
    parser.add_argument("--no_star", action="store_true")
    parser.add_argument("--codecs", nargs="+", default=["fp32"],
                        choices=["fp32", "bf16", "fp16", "int8"])
    args = parser.parse_args()
    bin_dir = build(["//coordinator", "//coordinator:localsgdctl", "//tests/testutil:averaging_member",
                     "//deploy:delay_line"])
    bandwidth = rate_bytes_per_second(args.rate)
    print(f"{'N':>2} {'codec':>5} {'chunk KiB':>9} {'streams':>7} {'bound s':>8} {'star s':>8} {'star@ready s':>12} "
          f"{'sharded s':>9} {'sharded@ready s':>15} {'gloo s':>8} {'sharded/bound':>13} "
          f"{'@ready/bound':>12} {'sharded/gloo':>12} {'@ready/gloo':>11} "
          f"{'star@ready/gloo':>15} {'@ready/fp32':>11} {'aborts':>6}")
    with tempfile.TemporaryDirectory() as work:
        for nodes in args.nodes:
            hosts = nodes + 1
            with Hosts(PREFIX, hosts, args.rate, args.delay, bin_dir, args.tuned_tcp):
                nan = float("nan")
                star = (RoundTimes(nan, nan) if args.no_star else
                        exchange_round_seconds(bin_dir, work, nodes, args.size_mb,
                                               "EXCHANGE_STAR", args.rounds)[0])
                sharded = [(codec, kb, streams,
                            exchange_round_seconds(bin_dir, work, nodes, args.size_mb,
                                                   "EXCHANGE_SHARDED", args.rounds, kb, codec,
                                                   streams))
                           for kb in args.chunk_kb for codec in args.codecs
                           for streams in args.ring_streams]
                gloo = gloo_round_seconds(work, nodes, args.size_mb, args.rounds)
            bound = 2 * (nodes - 1) / nodes * args.size_mb * 1e6 / bandwidth
            fp32 = {kb: times.ready for codec, kb, streams, (times, _) in sharded
                    if codec == "fp32" and streams == args.ring_streams[0]}
            for codec, kb, streams, (times, aborts) in sharded:
                print(f"{nodes:>2} {codec:>5} {kb or 'default':>9} {streams:>7} {bound:>8.3f} "
                      f"{star.slowest:>8.3f} "
                      f"{star.ready:>12.3f} {times.slowest:>9.3f} {times.ready:>15.3f} "
                      f"{gloo:>8.3f} {times.slowest / bound:>13.2f} {times.ready / bound:>12.2f} "
                      f"{times.slowest / gloo:>12.2f} {times.ready / gloo:>11.2f} "
                      f"{star.ready / gloo:>15.2f} {times.ready / fp32.get(kb, nan):>11.2f} "
                      f"{aborts:>6}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
