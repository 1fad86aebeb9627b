#!/usr/bin/python3
"""Test accuracy on Fashion-MNIST against the published benchmark table: 4 workers (4 nodes x 1
rank, real coordinator and worker processes on loopback) with local_sgd_steps in {1, 8, 32},
plus a single-process baseline (one worker, no averaging), for the given models. Targets: MLP
>= 0.883 and CNN >= 0.916 (the Fashion-MNIST table lists 0.8833 for an MLP 256-128-100 and
0.916 for 2 Conv+pooling), and local_sgd_steps = 8 within 0.5 points of local_sgd_steps = 1.

Usage: /usr/bin/python3 bench/accuracy_bench.py [--models mlp cnn] [--epochs 12]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import os
import re
import subprocess
import tempfile
import time


def build():
    subprocess.run(["bazel", "build", "-c", "opt", "//coordinator", "//coordinator:localsgdctl",
                    "//worker"], check=True, stderr=subprocess.DEVNULL)
    return subprocess.run(["bazel", "info", "-c", "opt", "bazel-bin"], check=True,
                          capture_output=True, text=True).stdout.strip()


def run(bin_dir, work, model, workers, k, enabled, epochs):
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
            f.write(f'model {{ builtin: "{model}" }} '
                    f'dataset {{ kind: DATASET_KIND_FASHION_MNIST '
                    f'path: "/usr/share/datasets/fashion-mnist" shuffle: true }} '
                    f'local_sgd_steps: {k} enabled: {"true" if enabled else "false"} '
                    f'epochs: {epochs} batch_size: 64 min_workers: {workers} '
                    f'optimizer {{ lr: 0.05 momentum: 0.9 }} '
                    f'lr_schedule {{ kind: LR_SCHEDULE_KIND_COSINE }}\n')
        start = time.time()
        subprocess.run([f"{bin_dir}/coordinator/localsgdctl", f"--coordinator={address}",
                        f"--token_file={token}", "start", f"--spec={spec}"], check=True,
                       stdout=subprocess.DEVNULL)
        accuracies = []
        for p in procs:
            out, _ = p.communicate(timeout=6 * 3600)
            accuracies.append(float(re.search(r"test accuracy ([\d.]+)", out.split(" done: ")[-1]).group(1)))
        return accuracies[0], time.time() - start
    finally:
        coordinator.terminate()
        coordinator.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    parser.add_argument("--epochs", type=float, default=12)
    args = parser.parse_args()
    bin_dir = build()
    targets = {"mlp": 0.883, "cnn": 0.916}
    print(f"{'model':<5} {'setup':<28} {'test accuracy':>13} {'target':>7} {'seconds':>8}")
    with tempfile.TemporaryDirectory() as work:
        for model in args.models:
            results = {}
            for label, workers, k, enabled in [("1 process, no averaging", 1, 1, False),
                                               ("4 workers, local_sgd_steps 1", 4, 1, True),
                                               ("4 workers, local_sgd_steps 8", 4, 8, True),
                                               ("4 workers, local_sgd_steps 32", 4, 32, True)]:
                accuracy, seconds = run(bin_dir, work, model, workers, k, enabled, args.epochs)
                results[k if enabled else 0] = accuracy
                print(f"{model:<5} {label:<28} {accuracy:>13.4f} {targets[model]:>7} "
                      f"{seconds:>8.0f}", flush=True)
            gap = (results[1] - results[8]) * 100
            print(f"{model}: local_sgd_steps 8 is {gap:+.2f} points below local_sgd_steps 1 "
                  f"(target: within 0.5)", flush=True)


if __name__ == "__main__":
    main()
