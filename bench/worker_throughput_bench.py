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
import os
import re
import statistics
import subprocess
import tempfile


def build():
    subprocess.run(["bazel", "build", "-c", "opt", "//coordinator", "//coordinator:localsgdctl",
                    "//worker"], check=True, stderr=subprocess.DEVNULL)
    return subprocess.run(["bazel", "info", "-c", "opt", "bazel-bin"], check=True,
                          capture_output=True, text=True).stdout.strip()


def run(bin_dir, work, enabled, steps, workers=4):
    token = os.path.join(work, "token")
    with open(token, "w") as f:
        f.write("bench")
    coordinator = subprocess.Popen(
        [f"{bin_dir}/coordinator/coordinator", "--grpc_address=127.0.0.1:0", "--http_address=",
         f"--token_file={token}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        address = re.match(r"grpc listening on (\S+)", coordinator.stdout.readline()).group(1)
        procs = [subprocess.Popen(
            [f"{bin_dir}/worker/worker", f"--coordinator={address}", f"--token_file={token}",
             f"--node_name=node-{i}", f"--node_rank={i}", f"--num_nodes={workers}",
             "--log_every=1000000"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            for i in range(workers)]
        spec = os.path.join(work, "spec.textproto")
        with open(spec, "w") as f:
            f.write(f'model {{ builtin: "mlp" }} dataset {{ synthetic_samples: 16384 }} '
                    f'total_steps: {steps} batch_size: 64 min_workers: {workers} '
                    f'local_sgd_steps: 8 enabled: {"true" if enabled else "false"}\n')
        subprocess.run([f"{bin_dir}/coordinator/localsgdctl", f"--coordinator={address}",
                        f"--token_file={token}", "start", f"--spec={spec}"], check=True,
                       stdout=subprocess.DEVNULL)
        rates = []
        for p in procs:
            out, _ = p.communicate(timeout=1800)
            rates.append(float(re.search(r"done: .* samples/s ([\d.]+)", out).group(1)))
        return statistics.mean(rates)
    finally:
        coordinator.terminate()
        coordinator.wait()


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
