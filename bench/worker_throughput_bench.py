#!/usr/bin/python3
"""Cost of LocalSGD on training throughput: one worker's samples/s with averaging disabled
against the same worker with local_sgd_steps = 8, each in a 4-worker run (4 nodes x 1 rank,
real coordinator and worker processes on loopback, the embedded synthetic task and the MLP).
samples/s covers the whole training, sync rounds included. Ratio = K=8 / disabled; target
>= 0.95. Each worker trains with one thread (--threads=1): the 4 simulated nodes share this
machine's cores, where on a cluster each would have its own (the automatic setting would give
each all of them, and 4 times as many threads as cores spin against each other). The K=8 runs
use each --exchanges mode (sharded and star by default), interleaved; a mode may name its
chunk size, e.g. EXCHANGE_SHARDED:1024 (KiB; default: the run's own).

Usage: /usr/bin/python3 bench/worker_throughput_bench.py [--steps 400] [--repeats 2]
       [--exchanges EXCHANGE_SHARDED EXCHANGE_STAR]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import statistics
import tempfile

from localsgd_cluster import Cluster, build, done_line


def run(bin_dir, work, exchange, steps, workers=4):
    """exchange None: averaging disabled; "MODE:KB" sets chunk_bytes."""
    mode, _, chunk_kb = (exchange or "EXCHANGE_SHARDED").partition(":")
    with Cluster(bin_dir, work) as cluster:
        cluster.workers(workers, "--threads=1")
        cluster.start(f'model {{ builtin: "mlp" }} dataset {{ synthetic_samples: 16384 }} '
                      f'total_steps: {steps} batch_size: 64 min_workers: {workers} '
                      f'local_sgd_steps: 8 enabled: {"false" if exchange is None else "true"} '
                      f'exchange: {mode}'
                      + (f' chunk_bytes: {int(chunk_kb) * 1024}' if chunk_kb else ''))
        return statistics.mean(done_line(out)["samples_per_second"] for out in cluster.wait())


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--exchanges", nargs="+", default=["EXCHANGE_SHARDED", "EXCHANGE_STAR"])
    args = parser.parse_args()
    bin_dir = build()
    runs = {None: []}
    runs.update({exchange: [] for exchange in args.exchanges})
    with tempfile.TemporaryDirectory() as work:
        for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits all
            for exchange in runs:
                runs[exchange].append(run(bin_dir, work, exchange, args.steps))
    d = statistics.median(runs[None])
    print(f"samples/s per worker, 4 workers: disabled {d:.1f} "
          f"(runs {[round(x, 1) for x in runs[None]]})")
    for exchange in args.exchanges:
        e = statistics.median(runs[exchange])
        print(f"local_sgd_steps=8, {exchange}: {e:.1f}, ratio {e / d:.3f} "
              f"(runs {[round(x, 1) for x in runs[exchange]]})")


if __name__ == "__main__":
    main()
