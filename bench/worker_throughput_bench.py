#!/usr/bin/python3
"""Cost of LocalSGD on training throughput: averaging disabled against local_sgd_steps = 8,
each in a 4-worker run (4 nodes x 1 rank, real coordinator and worker processes on loopback,
the embedded synthetic task and the MLP). Target: ratio (K=8 / disabled) >= 0.95.

Two figures per mode, both over the whole training, sync rounds included:
- cluster samples/s: all workers' samples over the time the cluster trained, from the first
  worker's start of training to the last one's end (each worker's window is its own measured
  training time, ending when its "done" line arrives). This is the figure a cluster gives.
- per worker: the mean of the workers' own samples/s. The 4 simulated nodes share this
  machine's cores, so without averaging a worker that starts training while the others still
  load (or goes on after they finished) has more than its share of the cores; averaging keeps
  the workers in step, and this figure counts that against it although the cluster as a whole
  trains no slower.
And the share of the machine's CPU left idle while the cluster trained: the time rounds leave
every worker waiting.

Each worker trains with one thread (--threads=1): the nodes share the cores, where on a cluster
each would have its own (the automatic setting would give each all of them, and 4 times as many
threads as cores spin against each other). The K=8 runs use each --exchanges mode (sharded and
star by default), interleaved; a mode may name its chunk size, e.g. EXCHANGE_SHARDED:1024 (KiB;
default: the run's own), and its overlap_steps, e.g. EXCHANGE_SHARDED+7.

First, one optimizer step's time on one worker (averaging off) against the same model's step in
Python torch on this machine, at 1 thread and at all cores: an MLP 784-1024-1024-10 scripted to
TorchScript once and loaded by both, batch 64 of the same synthetic 28x28 inputs, each batch
gathered from the data set with index_select, SGD. Both go through the same libblas.so.3 (the
README's set-up selects OpenBLAS); the ratio shows what the worker adds.

Usage: /usr/bin/python3 bench/worker_throughput_bench.py [--steps 400] [--repeats 2]
       [--exchanges EXCHANGE_SHARDED EXCHANGE_STAR] [--step_time_only]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import collections
import os
import statistics
import tempfile
import threading
import time

from localsgd_cluster import Cluster, build, done_line, timed_outputs


Throughput = collections.namedtuple("Throughput", ["cluster", "per_worker", "idle"])


class IdleSampler:
    """Samples the machine's idle CPU time (/proc/stat: idle + iowait, all cores) every 0.2 s,
    so that the idle share of any span of the run can be read afterwards: the cores averaging
    leaves unused while workers wait for a round."""

    def __init__(self):
        self.samples, self.stop = [], threading.Event()
        self.thread = threading.Thread(target=self.loop)
        self.thread.start()

    def loop(self):
        while True:
            with open("/proc/stat") as f:
                values = [int(v) for v in f.readline().split()[1:]]
            self.samples.append((time.monotonic(), values[3] + values[4], sum(values)))
            if self.stop.wait(0.2):
                return

    def share(self, start, end):
        self.stop.set()
        self.thread.join()
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            return float("nan")
        return (inside[-1][1] - inside[0][1]) / max(1, inside[-1][2] - inside[0][2])


def run(bin_dir, work, exchange, steps, workers=4, batch=64):
    """exchange None: averaging disabled; "MODE[:KB][+TAU]" sets chunk_bytes and overlap_steps."""
    mode, _, overlap = (exchange or "EXCHANGE_SHARDED").partition("+")
    mode, _, chunk_kb = mode.partition(":")
    with Cluster(bin_dir, work) as cluster:
        cluster.workers(workers, "--threads=1")
        cluster.start(f'model {{ builtin: "mlp" }} dataset {{ synthetic_samples: 16384 }} '
                      f'total_steps: {steps} batch_size: {batch} min_workers: {workers} '
                      f'local_sgd_steps: 8 enabled: {"false" if exchange is None else "true"} '
                      f'exchange: {mode} overlap_steps: {overlap or 0}'
                      + (f' chunk_bytes: {int(chunk_kb) * 1024}' if chunk_kb else ''))
        windows, rates = [], []
        idle = IdleSampler()
        for out, done_at in timed_outputs(cluster.worker_procs):
            done = done_line(out)
            samples = done["steps"] * batch
            rates.append(done["samples_per_second"])
            windows.append((done_at - samples / done["samples_per_second"], done_at, samples))
        start, end = min(w[0] for w in windows), max(w[1] for w in windows)
        return Throughput(sum(s for _, _, s in windows) / (end - start), statistics.mean(rates),
                          idle.share(start, end))


def blas():
    """The file libblas.so.3 resolves to (Debian's alternative)."""
    return os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")


def script_mlp(path):
    import torch

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Flatten(), torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))

        def forward(self, x):
            return self.net(x)

    torch.manual_seed(0)
    torch.jit.script(Mlp()).save(path)


def train_steps(model, optimizer, inputs, targets, steps, batch, after_step=lambda step: None):
    """`steps` optimizer steps on batches drawn as the worker draws them (torch.randperm of the
    samples, a new one when the next batch does not fit; seed torch first), cross-entropy;
    after_step(step) after each (1-based)."""
    import torch
    order, cursor = torch.randperm(len(inputs)), 0
    for step in range(1, steps + 1):
        if cursor + batch > len(inputs):
            order, cursor = torch.randperm(len(inputs)), 0
        idx = order[cursor:cursor + batch]
        cursor += batch
        loss = torch.nn.functional.cross_entropy(model(inputs.index_select(0, idx)),
                                                 targets.index_select(0, idx))
        loss.backward()
        loss.item()
        optimizer.step()
        optimizer.zero_grad()
        after_step(step)


def python_step_ms(model_path, threads, steps, batch=64, samples=16384):
    """Python torch's milliseconds per step, over all `steps` (as the worker reports them)."""
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = torch.jit.load(model_path)
    inputs = torch.randn(samples, 1, 28, 28)
    targets = torch.randint(0, 10, (samples,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    start = time.perf_counter()
    train_steps(model, optimizer, inputs, targets, steps, batch)
    return (time.perf_counter() - start) / steps * 1000


def worker_step_ms(bin_dir, work, model_path, threads, steps, batch=64):
    """The worker's milliseconds per step (its samples/s over all its steps), averaging off."""
    with Cluster(bin_dir, work) as cluster:
        cluster.workers(1, f"--threads={threads}")
        cluster.start(f'model {{ torchscript_path: "{model_path}" }} '
                      f'dataset {{ synthetic_samples: 16384 }} total_steps: {steps} '
                      f'batch_size: {batch} min_workers: 1 enabled: false '
                      f'optimizer {{ lr: 0.01 }}')
        done = done_line(cluster.wait()[0])
        return batch / done["samples_per_second"] * 1000


def step_times(bin_dir, work, steps, repeats):
    model_path = os.path.join(work, "mlp_784_1024_1024_10.pt")
    script_mlp(model_path)
    print(f"one step, MLP 784-1024-1024-10, batch 64, libblas.so.3 = {blas()}")
    for threads in sorted({1, os.cpu_count()}):
        worker, python = [], []
        for _ in range(repeats):
            worker.append(worker_step_ms(bin_dir, work, model_path, threads, steps))
            python.append(python_step_ms(model_path, threads, steps))
        w, p = statistics.median(worker), statistics.median(python)
        print(f"  {threads} thread(s): worker {w:.2f} ms, Python torch {p:.2f} ms, "
              f"ratio {w / p:.3f} (worker runs {[round(x, 2) for x in worker]}, "
              f"Python {[round(x, 2) for x in python]})")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--exchanges", nargs="+", default=["EXCHANGE_SHARDED", "EXCHANGE_STAR"])
    parser.add_argument("--step_time_only", action="store_true")
    args = parser.parse_args()
    bin_dir = build()
    with tempfile.TemporaryDirectory() as work:
        step_times(bin_dir, work, args.steps, args.repeats)
    if args.step_time_only:
        return
    runs = {None: []}
    runs.update({exchange: [] for exchange in args.exchanges})
    with tempfile.TemporaryDirectory() as work:
        for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits all
            for exchange in runs:
                runs[exchange].append(run(bin_dir, work, exchange, args.steps))
    for field, label in (("cluster", "cluster samples/s"), ("per_worker", "per worker")):
        d = statistics.median(getattr(t, field) for t in runs[None])
        print(f"{label}, 4 workers: disabled {d:.1f} "
              f"(runs {[round(getattr(t, field), 1) for t in runs[None]]})")
        for exchange in args.exchanges:
            e = statistics.median(getattr(t, field) for t in runs[exchange])
            print(f"  local_sgd_steps=8, {exchange}: {e:.1f}, ratio {e / d:.3f} "
                  f"(runs {[round(getattr(t, field), 1) for t in runs[exchange]]})")
    idle = {exchange or "disabled": statistics.median(t.idle for t in times)
            for exchange, times in runs.items()}
    print("idle CPU while the cluster trained (all cores): "
          + ", ".join(f"{mode} {share:.2%}" for mode, share in idle.items()))


if __name__ == "__main__":
    main()
