#!/usr/bin/python3
"""Overlapped rounds against the Local SGD a user would otherwise pick, on shaped links.

N nodes x 1 rank in network namespaces (deploy/netns/hosts.sh: every link shaped with tc tbf
to --rate), Fashion-MNIST (Debian's dataset-fashion-mnist), an MLP 784-1024-1024-10 (7.5 MB of
fp32) scripted to TorchScript once and loaded by both sides, batch 64 per rank, SGD lr 0.05
momentum 0.9, --steps optimizer steps per rank, one thread per process. Both sides draw the
same batches: rank g trains on samples g, g + N, ... in the order of torch.randperm after
torch.manual_seed(g) (the worker's own rule for seed 0).

- peer: Accelerate's LocalSGD algorithm on torch.distributed Gloo, in Python: every K optimizer
  steps each parameter is all_reduce'd and divided by N; once more at the end.
- localsgd: the worker and a coordinator (in its own namespace), exchange sharded, each row
  with its overlap_steps and codec.
- disabled: the worker with averaging off (no communication at all).

Reported per row: time to finish the steps (from the first rank's start of training to the
last rank's end, syncs included, setup not), the ratio to the peer at the same K, the
cluster's samples/s against `disabled` (how much communication is left unhidden), and the
final test accuracy (node 0's final model; every copy is equal after the last sync).

Usage (root): /usr/bin/python3 bench/overlap_bench.py [--nodes 4] [--rate 100mbit] [--delay 25ms]
              [--steps 640] [--ks 8 32] [--codecs CODEC_INT8] [--fragments 4]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import time

from localsgd_cluster import Cluster, Hosts, build, done_line, timed_outputs
from worker_throughput_bench import script_mlp, train_steps

PREFIX = "lsgdo"
DATA = "/usr/share/datasets/fashion-mnist"
BATCH = 64


def host(i):
    return ["ip", "netns", "exec", f"{PREFIX}-h{i}"]


def fashion_mnist(prefix):
    """The worker's Fashion-MNIST tensors: images scaled to [0, 1], then (x - 0.2860) / 0.3530."""
    import torch

    def idx(path):
        with gzip.open(path) as f:
            data = f.read()
        dims = data[3]
        shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
        return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).view(shape)

    images = idx(f"{DATA}/{prefix}-images-idx3-ubyte.gz").to(torch.float32)
    inputs = ((images / 255 - 0.2860) / 0.3530).unsqueeze(1)
    return inputs, idx(f"{DATA}/{prefix}-labels-idx1-ubyte.gz").to(torch.int64)


def peer_worker(rank, world, k, steps, model_path, master, out_path):
    """One rank of Accelerate's LocalSGD on Gloo; rank 0 writes 'start end accuracy'."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ["GLOO_SOCKET_IFNAME"] = "eth0"
    dist.init_process_group("gloo", init_method=f"tcp://{master}", rank=rank, world_size=world)
    inputs, targets = fashion_mnist("train")
    shard_x, shard_y = inputs[rank::world], targets[rank::world]
    model = torch.jit.load(model_path)
    params = list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=0.05, momentum=0.9)

    def average():
        with torch.no_grad():
            for p in params:
                dist.all_reduce(p.data)
                p.data /= world

    torch.manual_seed(rank)
    dist.barrier()
    start = time.time()
    train_steps(model, optimizer, shard_x, shard_y, steps, BATCH,
                lambda step: average() if step % k == 0 else None)
    if steps % k != 0:
        average()
    end = time.time()
    times = [None] * world
    dist.all_gather_object(times, (start, end))
    if rank == 0:
        test_x, test_y = fashion_mnist("t10k")
        with torch.no_grad():
            accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
        with open(out_path, "w") as f:
            f.write(f"{min(t[0] for t in times)} {max(t[1] for t in times)} {accuracy}\n")
    dist.destroy_process_group()


def run_peer(work, nodes, k, steps, model_path):
    out = os.path.join(work, "peer.txt")
    procs = [subprocess.Popen(host(i + 1) + [sys.executable, os.path.abspath(__file__),
                                             "--peer_worker", str(i), str(nodes), str(k),
                                             str(steps), model_path, "10.77.0.2:29500", out])
             for i in range(nodes)]
    for p in procs:
        if p.wait(timeout=3600) != 0:
            raise RuntimeError("a peer worker failed")
    start, end, accuracy = open(out).read().split()
    return float(end) - float(start), float(accuracy)


def run_localsgd(bin_dir, work, nodes, k, steps, model_path, overlap, codec, enabled=True,
                 fragments=1):
    """(seconds, accuracy, cluster samples/s) of one run."""
    with Cluster(bin_dir, work, host=host, listen="10.77.0.1:50051") as cluster:
        cluster.workers(nodes, "--threads=1")
        cluster.start(f'model {{ torchscript_path: "{model_path}" }} '
                      f'dataset {{ kind: DATASET_KIND_FASHION_MNIST path: "{DATA}" }} '
                      f'local_sgd_steps: {k} overlap_steps: {overlap} codec: {codec} '
                      f'fragments: {fragments} '
                      f'enabled: {"true" if enabled else "false"} total_steps: {steps} '
                      f'batch_size: {BATCH} min_workers: {nodes} '
                      f'optimizer {{ lr: 0.05 momentum: 0.9 }} round_deadline_seconds: 600')
        windows, accuracy = [], None
        for i, (out, done_at) in enumerate(timed_outputs(cluster.worker_procs)):
            done = done_line(out)
            samples = done["steps"] * BATCH
            windows.append((done_at - samples / done["samples_per_second"], done_at, samples))
            if i == 0:
                accuracy = done["accuracy"]
    start, end = min(w[0] for w in windows), max(w[1] for w in windows)
    return end - start, accuracy, sum(w[2] for w in windows) / (end - start)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--peer_worker":
        rank, world, k, steps, model_path, master, out = sys.argv[2:9]
        peer_worker(int(rank), int(world), int(k), int(steps), model_path, master, out)
        return 0
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--rate", default="100mbit")
    parser.add_argument("--delay", default="",
                        help="held at each host's ingress (hosts.sh's DELAY): 25ms, 50 ms round trips")
    parser.add_argument("--steps", type=int, default=640)
    parser.add_argument("--ks", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--codecs", nargs="+", default=["CODEC_BF16", "CODEC_INT8"],
                        help="lossy codecs tried with overlap K-1")
    parser.add_argument("--fragments", type=int, default=1,
                        help="> 1: also each codec with this many fragments, overlap K/P - 1")
    args = parser.parse_args()
    bin_dir = build()
    hosts = args.nodes + 1
    with tempfile.TemporaryDirectory() as work:
        os.chmod(work, 0o755)
        model_path = os.path.join(work, "mlp_784_1024_1024_10.pt")
        script_mlp(model_path)
        with Hosts(PREFIX, hosts, args.rate, args.delay, bin_dir):
            base_s, base_acc, base_rate = run_localsgd(bin_dir, work, args.nodes, 8, args.steps,
                                                       model_path, 0, "CODEC_FP32", False)
            print(f"N = {args.nodes}, {args.rate}, {args.steps} steps; disabled: {base_s:.1f} s, "
                  f"accuracy {base_acc:.4f}, {base_rate:.0f} samples/s", flush=True)
            print(f"{'K':>3} {'row':<24} {'seconds':>8} {'/peer':>6} {'/disabled rate':>14} "
                  f"{'accuracy':>8}", flush=True)
            for k in args.ks:
                peer_s, peer_acc = run_peer(work, args.nodes, k, args.steps, model_path)
                print(f"{k:>3} {'peer (Accelerate, Gloo)':<24} {peer_s:>8.1f} {1:>6.2f} "
                      f"{args.steps * BATCH * args.nodes / peer_s / base_rate:>14.2f} "
                      f"{peer_acc:>8.4f}", flush=True)
                rows = [(overlap, codec, 1) for codec in ["CODEC_FP32"] + args.codecs
                        for overlap in (0, k - 1)]
                if args.fragments > 1:
                    rows += [(k // args.fragments - 1, codec, args.fragments)
                             for codec in args.codecs]
                for overlap, codec, fragments in rows:
                    s, acc, rate = run_localsgd(bin_dir, work, args.nodes, k, args.steps,
                                                model_path, overlap, codec, fragments=fragments)
                    label = f"tau {overlap}, {codec[6:].lower()}" + (
                        f", P {fragments}" if fragments > 1 else "")
                    print(f"{k:>3} {label:<24} {s:>8.1f} {s / peer_s:>6.2f} "
                          f"{rate / base_rate:>14.2f} {acc:>8.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
