#!/usr/bin/python3
"""Time to a target test accuracy on Fashion-MNIST over 100 Mbit/s links: local_sgd_steps 1
against 8. A coordinator and NODES worker nodes (one worker each) run in their own network
namespaces joined by veth pairs through a bridge, every link shaped with tc tbf
(deploy/netns/hosts.sh). The MLP trains with batch 64 per worker; workers evaluate on the test
split every 8 optimizer steps; time to target is the training time (evaluations excluded, as
they cost the same for both) until the first evaluation at or above the target. Speed-up = time(K=1) / time(K=8); target >= 4.

Usage (root): /usr/bin/python3 bench/netns_bench.py [--rate 100mbit] [--target 0.80]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import os
import re
import subprocess
import tempfile


def build():
    subprocess.run(["bazel", "build", "-c", "opt", "//coordinator", "//coordinator:localsgdctl",
                    "//worker"], check=True, stderr=subprocess.DEVNULL)
    return subprocess.run(["bazel", "info", "-c", "opt", "bazel-bin"], check=True,
                          capture_output=True, text=True).stdout.strip()


def time_to_target(bin_dir, work, k, args):
    hosts = args.nodes + 1
    prefix = "lsgdb"
    subprocess.run(["deploy/netns/hosts.sh", "up", prefix, str(hosts), args.rate], check=True)
    procs = []
    try:
        token = os.path.join(work, "token")
        with open(token, "w") as f:
            f.write("bench")
        ns = lambda i: ["ip", "netns", "exec", f"{prefix}-h{i}"]
        coordinator = subprocess.Popen(
            ns(0) + [f"{bin_dir}/coordinator/coordinator", "--grpc_address=10.77.0.1:50051",
                     "--http_address=", f"--token_file={token}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(coordinator)
        coordinator.stdout.readline()
        workers = []
        for n in range(args.nodes):
            workers.append(subprocess.Popen(
                ns(n + 1) + [f"{bin_dir}/worker/worker", "--coordinator=10.77.0.1:50051",
                             f"--token_file={token}", f"--node_name=node-{n}",
                             f"--node_rank={n}", f"--num_nodes={args.nodes}",
                             f"--rendezvous_dir={work}", "--log_every=1000000"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        procs += workers
        spec = os.path.join(work, "spec.textproto")
        with open(spec, "w") as f:
            f.write(f'model {{ builtin: "mlp" }} '
                    f'dataset {{ kind: DATASET_KIND_FASHION_MNIST '
                    f'path: "/usr/share/datasets/fashion-mnist" }} '
                    f'local_sgd_steps: {k} eval_every_rounds: {8 // k} total_steps: {args.steps} '
                    f'batch_size: 64 min_workers: {args.nodes} '
                    f'optimizer {{ lr: 0.05 momentum: 0.9 }} round_deadline_seconds: 600\n')
        subprocess.run(ns(0) + [f"{bin_dir}/coordinator/localsgdctl",
                                "--coordinator=10.77.0.1:50051", f"--token_file={token}",
                                "start", f"--spec={spec}"], check=True, stdout=subprocess.DEVNULL)
        out, _ = workers[0].communicate(timeout=3600)
        for w in workers[1:]:
            w.communicate(timeout=3600)
        evals = [(int(s), float(a), float(t)) for s, a, t in re.findall(
            r"step (\d+): test accuracy ([\d.]+), test loss [\d.]+ after ([\d.]+) s of training",
            out)]
        done = re.search(r"done: (\d+) steps.*samples/s ([\d.]+)", out)
        hit = next(((s, a, t) for s, a, t in evals if a >= args.target), None)
        return hit, evals[-1] if evals else None, float(done.group(2))
    finally:
        for p in procs:
            p.kill()
            p.wait()
        subprocess.run(["deploy/netns/hosts.sh", "down", prefix, str(hosts)], check=False)


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
