#!/usr/bin/python3
"""A cluster with one slow node: fixed-K rounds against paced rounds (docs/design.md, "Paced
rounds"), on shaped links.

4 nodes x 1 rank in network namespaces (deploy/netns/hosts.sh: every link shaped with tc tbf to
--rate, --delay at each host's ingress), the coordinator in a fifth, Fashion-MNIST (Debian's
dataset-fashion-mnist), the built-in MLP (0.94 MB), batch 64, SGD lr 0.05 momentum 0.9, one
thread per worker, exchange sharded. Every worker runs in a cgroup with a CPU quota: --base of
one core (this machine's cores hold four such nodes beside each other), and the slow node
--slow of that (50 %, then 25 %), slowed the same way in every row.

- alone: each node's own samples/s, measured in a run of its own (one node, no one to wait for)
  under its quota, twice, the faster counting; their sum is what the cluster could do.
- fixed K: today's rounds (every node local_sgd_steps a round), the slow node among them; and
  the uniform cluster (every node at --base) for the accuracy at equal samples.
- paced: round_seconds = K x the fast nodes' step time measured alone, round_grace_seconds half
  of that after 2 of 4 nodes; total_steps chosen so that the cluster trains as many samples as
  the uniform fixed-K run (the samples each side trained are printed).

Reported per row: the cluster's samples/s, counting the samples in its committed rounds (each
member's steps in the rounds' records, times the batch) over the time it trained (the longest
node's training, syncs included); its ratio to the sum of the nodes alone; the samples trained
(dropped ones too) per second; and the final test accuracy (every copy is equal after the last
sync).

Usage (root): /usr/bin/python3 bench/straggler_bench.py [--rate 100mbit] [--delay 5ms]
              [--k 512] [--tau 255] [--rounds 12] [--base 0.3] [--slow 0.5 0.25]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

from localsgd_cluster import Cluster, Hosts, build, done_line

PREFIX = "lsgds"
NODES = 4
BATCH = 64
CGROUP_V1 = "/sys/fs/cgroup/cpu"
CGROUP_V2 = "/sys/fs/cgroup"


class Quotas:
    """CPU quotas, one cgroup per host (cgroup v1's cpu controller, else v2's cpu.max); a
    process started through prefix(i) runs in host i's."""

    def __init__(self):
        self.v1 = os.path.exists(f"{CGROUP_V1}/cpu.cfs_quota_us")
        self.root = f"{CGROUP_V1}/{PREFIX}" if self.v1 else f"{CGROUP_V2}/{PREFIX}"
        os.makedirs(self.root, exist_ok=True)
        if not self.v1:
            with open(f"{CGROUP_V2}/cgroup.subtree_control", "w") as f:
                f.write("+cpu")
            with open(f"{self.root}/cgroup.subtree_control", "w") as f:
                f.write("+cpu")

    def set(self, host, cores):
        path = f"{self.root}/h{host}"
        os.makedirs(path, exist_ok=True)
        period = 100000
        if self.v1:
            with open(f"{path}/cpu.cfs_period_us", "w") as f:
                f.write(str(period))
            with open(f"{path}/cpu.cfs_quota_us", "w") as f:
                f.write(str(int(cores * period)))
        else:
            with open(f"{path}/cpu.max", "w") as f:
                f.write(f"{int(cores * period)} {period}")

    def prefix(self, host):
        return ["sh", "-c", f'echo $$ > {self.root}/h{host}/cgroup.procs && exec "$0" "$@"',
                "ip", "netns", "exec", f"{PREFIX}-h{host}"]

    def remove(self):
        for name in sorted(os.listdir(self.root)):
            if name.startswith("h"):
                os.rmdir(f"{self.root}/{name}")
        os.rmdir(self.root)


def spec(args, nodes, steps, paced=None):
    text = (f'model {{ builtin: "mlp" }} dataset {{ kind: DATASET_KIND_FASHION_MNIST path: '
            f'"/usr/share/datasets/fashion-mnist" }} local_sgd_steps: {args.k} '
            f'overlap_steps: {args.tau} total_steps: {steps} batch_size: {BATCH} '
            f'min_workers: {nodes} optimizer {{ lr: 0.05 momentum: 0.9 }} '
            f'round_deadline_seconds: 120')
    if paced:
        seconds, grace = paced
        text = text.replace(f"min_workers: {nodes}", "min_workers: 2")
        text += f" round_seconds: {seconds:.4f} round_grace_seconds: {grace:.4f}"
    return text


def run(bin_dir, work, quotas, cores, steps, args, paced=None):
    """One run of len(cores) nodes, node n held to cores[n] once every node trains (each starts at
    cores[0]: a slow node's start is not what is measured, and the others would wait for it):
    each node's done line."""
    for n in range(len(cores)):
        quotas.set(n + 1, cores[0])
    quotas.set(0, 2.0)
    run_dir = tempfile.mkdtemp(dir=work)
    with Cluster(bin_dir, run_dir, host=lambda i: quotas.prefix(i), listen="10.77.0.1:50051",
                 http="10.77.0.1:8080") as cluster:
        cluster.workers(len(cores), "--threads=1")
        cluster.start(spec(args, len(cores), steps, paced))
        slowed = threading.Thread(target=slow_once_training, args=(quotas, cores, run_dir))
        slowed.start()
        outputs = cluster.wait()
        slowed.join()
        committed = committed_samples()
    for n, out in enumerate(outputs):
        if " done: " not in out:
            with open(f"{run_dir}/node-{n}.err") as f:
                raise RuntimeError(f"node {n} did not finish:\n{out[-2000:]}{f.read()[-4000:]}")
    shutil.rmtree(run_dir, ignore_errors=True)
    return [done_line(out) for out in outputs], committed


def committed_samples():
    """The samples in the run's committed rounds (their records' shares: each member's steps
    times its workers times the batch): what the model learned from, not what was trained and
    then dropped."""
    status = json.loads(subprocess.run(
        ["ip", "netns", "exec", f"{PREFIX}-h0", "/usr/bin/python3", "-c",
         "import urllib.request; print(urllib.request.urlopen("
         "'http://10.77.0.1:8080/status').read().decode())"],
        check=True, capture_output=True, text=True).stdout)
    run_id = status["run"]["run_id"]
    return sum(int(share["steps"]) * share["workers"] * BATCH
               for r in status.get("recent_rounds", [])
               if r["run_id"] == run_id and r["outcome"] == "ROUND_OUTCOME_COMMITTED"
               for share in r.get("shares", []))


def slow_once_training(quotas, cores, run_dir, timeout=600):
    """Sets node n's quota to cores[n] once every node's log says it trains."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        training = 0
        for n in range(len(cores)):
            with open(f"{run_dir}/node-{n}.err") as f:
                training += " trains on " in f.read()
        if training == len(cores):
            break
        time.sleep(0.05)
    for n, c in enumerate(cores):
        quotas.set(n + 1, c)


def row(name, result, alone_sum):
    """Prints a run's row: the samples in its committed rounds per second of its training (and
    the samples trained, dropped ones too), against the nodes alone. Returns (committed
    samples/s, committed samples, accuracy)."""
    done, committed = result
    trained = sum(d["samples_per_second"] for d in done)
    seconds = max(d["samples"] / d["samples_per_second"] for d in done)
    rate = committed / seconds
    print(f"{name:<22} {rate:8.0f} samples/s committed  {rate / alone_sum:5.2f}x alone  "
          f"(trained {trained:6.0f}/s, {trained / alone_sum:4.2f}x)  {seconds:6.1f} s  "
          f"samples committed {committed} of trained "
          f"{', '.join(str(d['samples']) for d in done)}  accuracy {done[0]['accuracy']:.4f}",
          flush=True)
    return rate, committed, done[0]["accuracy"]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", default="100mbit")
    parser.add_argument("--delay", default="5ms")
    parser.add_argument("--k", type=int, default=512)
    parser.add_argument("--tau", type=int, default=255)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--base", type=float, default=0.3)
    parser.add_argument("--slow", type=float, nargs="+", default=[0.5, 0.25])
    parser.add_argument("--alone_steps", type=int, default=1024)
    args = parser.parse_args()
    bin_dir = build()
    steps = args.k * args.rounds
    quotas = Quotas()
    try:
        with tempfile.TemporaryDirectory() as work, \
                Hosts(PREFIX, NODES + 1, args.rate, args.delay, bin_dir):
            # Each quota alone twice, the faster counting (a moment of other load on the machine
            # would lower the sum the cluster is held to, and the pace).
            alone = {}
            for share in ([1.0] + args.slow) * 2:
                d = run(bin_dir, work, quotas, [args.base * share], args.alone_steps, args)[0][0]
                alone[share] = max(alone.get(share, 0), d["samples_per_second"])
                print(f"alone at {share:.2f} x {args.base} core: {d['samples_per_second']:.0f} "
                      f"samples/s", flush=True)
            fast_step = BATCH / alone[1.0]
            paced = (args.k * fast_step, args.k * fast_step / 2)
            print(f"paced: round_seconds {paced[0]:.3f}, round_grace_seconds {paced[1]:.3f}",
                  flush=True)
            uniform = row("fixed K, uniform", run(bin_dir, work, quotas, [args.base] * NODES,
                                                  steps, args), NODES * alone[1.0])
            for share in args.slow:
                cores = [args.base] * (NODES - 1) + [args.base * share]
                alone_sum = (NODES - 1) * alone[1.0] + alone[share]
                print(f"-- one node at {share:.2f}: the nodes alone sum to {alone_sum:.0f} "
                      f"samples/s", flush=True)
                row(f"fixed K, slow {share:.2f}", run(bin_dir, work, quotas, cores, steps, args),
                    alone_sum)
                # As many samples as the uniform run: the slow node trains `share` of a round.
                paced_steps = -(-steps * NODES // int(round((NODES - 1 + share) * args.k))) * args.k
                _, samples, accuracy = row(
                    f"paced, slow {share:.2f}",
                    run(bin_dir, work, quotas, cores, paced_steps, args, paced), alone_sum)
                print(f"   accuracy {accuracy:.4f} at {samples} samples against the uniform "
                      f"fixed K's {uniform[2]:.4f} at {uniform[1]}: "
                      f"{100 * (accuracy - uniform[2]):+.2f} points", flush=True)
    finally:
        quotas.remove()


if __name__ == "__main__":
    main()
