#!/usr/bin/python3
"""Time to a target test accuracy on Fashion-MNIST over 100 Mbit/s links: local_sgd_steps 1
against 8. A coordinator and NODES worker nodes (one worker each) run in their own network
namespaces joined by veth pairs through a bridge, every link shaped with tc tbf
(deploy/netns/hosts.sh). The MLP trains with batch 64 per worker; workers evaluate on the test
split every 8 optimizer steps; time to target is the training time (evaluations excluded, as
they cost the same for both) until the first evaluation at or above the target.
Speed-up = time(K=1) / time(K=8); target >= 4.

Usage (root): /usr/bin/python3 bench/netns_bench.py [--rate 100mbit] [--target 0.80]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import re
import tempfile

from localsgd_cluster import Cluster, Hosts, build, done_line

PREFIX = "lsgdb"


def time_to_target(bin_dir, work, k, args):
    hosts = args.nodes + 1
    with Hosts(PREFIX, hosts, args.rate):
        with Cluster(bin_dir, work, host=lambda i: ["ip", "netns", "exec", f"{PREFIX}-h{i}"],
                     listen="10.77.0.1:50051") as cluster:
            cluster.workers(args.nodes)
            cluster.start(f'model {{ builtin: "mlp" }} dataset {{ kind: DATASET_KIND_FASHION_MNIST '
                          f'path: "/usr/share/datasets/fashion-mnist" }} local_sgd_steps: {k} '
                          f'eval_every_rounds: {8 // k} total_steps: {args.steps} batch_size: 64 '
                          f'min_workers: {args.nodes} optimizer {{ lr: 0.05 momentum: 0.9 }} '
                          f'round_deadline_seconds: 600')
            out = cluster.wait()[0]
    evals = [(int(s), float(a), float(t)) for s, a, t in re.findall(
        r"step (\d+): test accuracy ([\d.]+), test loss [\d.]+ after ([\d.]+) s of training", out)]
    hit = next(((s, a, t) for s, a, t in evals if a >= args.target), None)
    return hit, evals[-1], done_line(out)["samples_per_second"]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", default="100mbit")
    parser.add_argument("--target", type=float, default=0.80)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    bin_dir = build()
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for k in (1, 8):
            hit, last, rate = time_to_target(bin_dir, work, k, args)
            results[k] = hit
            reached = (f"reached {args.target} at step {hit[0]} after {hit[2]:.1f} s"
                       if hit else f"did not reach {args.target}")
            print(f"local_sgd_steps {k}: {reached}; last eval step {last[0]} accuracy "
                  f"{last[1]:.4f} after {last[2]:.1f} s; samples/s per worker {rate:.1f}",
                  flush=True)
    if results[1] and results[8]:
        print(f"speed-up to {args.target} at {args.rate}: {results[1][2] / results[8][2]:.2f}x")


if __name__ == "__main__":
    main()
