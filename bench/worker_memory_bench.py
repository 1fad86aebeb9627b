#!/usr/bin/python3
"""A training worker's memory (issue 54): peak RSS of real node leaders (//worker:worker, one
rank each) training a TorchScript MLP of each --sizes_mb MB of fp32 parameters on
Fashion-MNIST, sharded fp32 rounds every --k steps, on loopback. Prints each worker's peak RSS
(VmHWM, read every 20 ms) and, between consecutive sizes, what each MB of model adds to the
peak: the worker's memory in model sizes S, without the process's fixed share (the dataset in
memory, LibTorch), which the sizes have alike.

Usage: /usr/bin/python3 bench/worker_memory_bench.py [--sizes_mb 300 600] [--nodes 2] [--k 2]
       [--steps 16]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import os
import re
import sys
import tempfile
import threading
import time

import torch

from localsgd_cluster import Cluster, build


def mlp(path, hidden):
    """A TorchScript MLP 784 -> hidden -> hidden -> 10 at `path`; its parameters' MB."""
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, 10))
    torch.jit.script(model).save(path)
    return sum(p.numel() for p in model.parameters()) * 4 / 1e6


def peaks_of(processes):
    """Each process's peak RSS in MB, read every 20 ms until all have exited."""
    peaks = [0.0] * len(processes)
    while any(p.poll() is None for p in processes):
        for i, p in enumerate(processes):
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    m = re.search(r"VmHWM:\s+(\d+) kB", f.read())
            except OSError:
                continue
            if m:
                peaks[i] = int(m.group(1)) / 1024
        time.sleep(0.02)
    return peaks


def run(bin_dir, model_path, nodes, k, steps):
    with tempfile.TemporaryDirectory() as work, Cluster(bin_dir, work) as cluster:
        cluster.workers(nodes, "--local_rank=0", "--local_world_size=1")
        cluster.start(f'model {{ torchscript_path: "{model_path}" }}\n'
                      'dataset { kind: DATASET_KIND_FASHION_MNIST '
                      'path: "/usr/share/datasets/fashion-mnist" }\n'
                      f"local_sgd_steps: {k}\ntotal_steps: {steps}\nbatch_size: 64\n"
                      f"min_workers: {nodes}\noptimizer {{ lr: 0.01 }}\n"
                      "exchange: EXCHANGE_SHARDED\nround_deadline_seconds: 300")
        peaks = []
        watcher = threading.Thread(target=lambda: peaks.extend(peaks_of(cluster.worker_procs)))
        watcher.start()
        outputs = cluster.wait()
        watcher.join()
        for p, out in zip(cluster.worker_procs, outputs):
            if p.returncode != 0:
                sys.exit(f"a worker exited {p.returncode}:\n{out[-2000:]}")
        return peaks


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes_mb", type=float, nargs="+", default=[300, 600])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args()
    bin_dir = build()
    print(f"N = {args.nodes} one-rank nodes; K = {args.k}; {args.steps} steps; sharded fp32")
    print("| model MB | worker peak RSS MB | / S | added per MB of model (from the size before) |")
    print("|---:|---|---:|---:|")
    before = None
    with tempfile.TemporaryDirectory() as models:
        for size_mb in args.sizes_mb:
            # 784 h + h^2 + 10 h values: the hidden width for the size asked.
            values = size_mb * 1e6 / 4
            hidden = int((-795 + (795 ** 2 + 4 * values) ** 0.5) / 2)
            path = os.path.join(models, f"mlp-{hidden}.pt")
            size = mlp(path, hidden)
            peak = max(run(bin_dir, path, args.nodes, args.k, args.steps))
            added = f"{(peak - before[1]) / (size - before[0]):.2f}" if before else ""
            print(f"| {size:.0f} | {peak:.0f} | {peak / size:.2f} | {added} |", flush=True)
            before = (size, peak)


if __name__ == "__main__":
    main()
