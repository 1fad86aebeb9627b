#!/usr/bin/python3
"""Cost of LocalSGD on training throughput: one worker's samples/s with averaging disabled
against the same worker with local_sgd_steps = 8, each in a 4-worker run (4 nodes x 1 rank,
real coordinator and worker processes on loopback, the embedded synthetic task and the MLP).
samples/s covers the whole training, sync rounds included. Ratio = K=8 / disabled; target
>= 0.95.

Usage: /usr/bin/python3 bench/worker_throughput_bench.py [--steps 400] [--repeats 2]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import statistics
import tempfile

from localsgd_cluster import Cluster, build, done_line


def run(bin_dir, work, enabled, steps, workers=4):
    with Cluster(bin_dir, work) as cluster:
        cluster.workers(workers)
        cluster.start(f'model {{ builtin: "mlp" }} dataset {{ synthetic_samples: 16384 }} '
                      f'total_steps: {steps} batch_size: 64 min_workers: {workers} '
                      f'local_sgd_steps: 8 enabled: {"true" if enabled else "false"}')
        return statistics.mean(done_line(out)["samples_per_second"] for out in cluster.wait())


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    bin_dir = build()
    disabled, enabled = [], []
    with tempfile.TemporaryDirectory() as work:
        for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits both
            disabled.append(run(bin_dir, work, False, args.steps))
            enabled.append(run(bin_dir, work, True, args.steps))
    d, e = statistics.median(disabled), statistics.median(enabled)
    print(f"samples/s per worker, 4 workers: disabled {d:.1f}, local_sgd_steps=8 {e:.1f}, "
          f"ratio {e / d:.3f} (runs: disabled {[round(x, 1) for x in disabled]}, "
          f"K=8 {[round(x, 1) for x in enabled]})")


if __name__ == "__main__":
    main()
