#!/usr/bin/python3
"""Test accuracy on Fashion-MNIST against the published benchmark table: 4 workers (4 nodes x 1
rank, real coordinator and worker processes on loopback) with local_sgd_steps in {1, 8, 32},
plus a single-process baseline (one worker, no averaging), for the given models. Targets: MLP
>= 0.883 and CNN >= 0.916 (the Fashion-MNIST table lists 0.8833 for an MLP 256-128-100 and
0.916 for 2 Conv+pooling), and local_sgd_steps = 8 within 0.5 points of local_sgd_steps = 1.

With --overlap it measures overlapped rounds instead: 4 workers with local_sgd_steps K in
{8, 32} and overlap_steps in {0, K/2, K-1}; target: within 0.5 points of overlap_steps 0.
With --codecs it measures the codecs: 4 workers, local_sgd_steps 8, the sharded exchange with
4 owners (min_shard_bytes 64 KiB, so the rounds go round the ring) in fp32, bf16 and int8;
target: within 0.2 points of fp32.
With --fragments it measures streaming fragments: 4 workers, local_sgd_steps K in {8, 32},
fragments P in {1, 4}, overlap_steps 0 and K/P - 1; target: within 0.5 points of P = 1 with the
same K and overlap (overlap_steps K/P - 1 then being 7 or 1 at P = 1 too).

Usage: /usr/bin/python3 bench/accuracy_bench.py [--models mlp cnn] [--epochs 12]
                                                [--overlap | --codecs | --fragments]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import tempfile
import time

from localsgd_cluster import Cluster, build, done_line


def run(bin_dir, work, model, workers, k, enabled, epochs, overlap=0, extra=""):
    with Cluster(bin_dir, work) as cluster:
        cluster.workers(workers)
        start = time.time()
        cluster.start(f'model {{ builtin: "{model}" }} dataset {{ kind: DATASET_KIND_FASHION_MNIST '
                      f'path: "/usr/share/datasets/fashion-mnist" shuffle: true }} '
                      f'local_sgd_steps: {k} overlap_steps: {overlap} '
                      f'enabled: {"true" if enabled else "false"} '
                      f'epochs: {epochs} batch_size: 64 min_workers: {workers} '
                      f'optimizer {{ lr: 0.05 momentum: 0.9 }} '
                      f'lr_schedule {{ kind: LR_SCHEDULE_KIND_COSINE }} {extra}')
        outputs = cluster.wait()
        return done_line(outputs[0])["accuracy"], time.time() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    parser.add_argument("--epochs", type=float, default=12)
    parser.add_argument("--overlap", action="store_true")
    parser.add_argument("--codecs", action="store_true")
    parser.add_argument("--fragments", action="store_true")
    args = parser.parse_args()
    bin_dir = build()
    if args.overlap:
        return overlap_table(bin_dir, args)
    if args.codecs:
        return codec_table(bin_dir, args)
    if args.fragments:
        return fragment_table(bin_dir, args)
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


def fragment_table(bin_dir, args):
    print(f"{'model':<5} {'K':>3} {'overlap':>7} {'fragments':>9} {'test accuracy':>13} "
          f"{'vs 1 (points)':>13} {'seconds':>8}")
    with tempfile.TemporaryDirectory() as work:
        for model in args.models:
            for k in (8, 32):
                for overlapped in (False, True):
                    whole = None
                    for fragments in (1, 4):
                        tau = k // 4 - 1 if overlapped else 0
                        accuracy, seconds = run(bin_dir, work, model, 4, k, True, args.epochs,
                                                tau, f"fragments: {fragments}")
                        whole = accuracy if fragments == 1 else whole
                        print(f"{model:<5} {k:>3} {tau:>7} {fragments:>9} {accuracy:>13.4f} "
                              f"{(accuracy - whole) * 100:>+13.2f} {seconds:>8.0f}", flush=True)


def codec_table(bin_dir, args):
    print(f"{'model':<5} {'codec':>5} {'test accuracy':>13} {'vs fp32 (points)':>16} {'seconds':>8}")
    with tempfile.TemporaryDirectory() as work:
        for model in args.models:
            fp32 = None
            for codec in ("fp32", "bf16", "int8"):
                accuracy, seconds = run(bin_dir, work, model, 4, 8, True, args.epochs, 0,
                                        f"exchange: EXCHANGE_SHARDED min_shard_bytes: 65536 "
                                        f"codec: CODEC_{codec.upper()}")
                fp32 = accuracy if codec == "fp32" else fp32
                print(f"{model:<5} {codec:>5} {accuracy:>13.4f} {(accuracy - fp32) * 100:>+16.2f} "
                      f"{seconds:>8.0f}", flush=True)


def overlap_table(bin_dir, args):
    print(f"{'model':<5} {'K':>3} {'overlap_steps':>13} {'test accuracy':>13} "
          f"{'vs 0 (points)':>13} {'seconds':>8}")
    with tempfile.TemporaryDirectory() as work:
        for model in args.models:
            for k in (8, 32):
                plain = None
                for overlap in (0, k // 2, k - 1):
                    accuracy, seconds = run(bin_dir, work, model, 4, k, True, args.epochs,
                                            overlap)
                    plain = accuracy if overlap == 0 else plain
                    print(f"{model:<5} {k:>3} {overlap:>13} {accuracy:>13.4f} "
                          f"{(accuracy - plain) * 100:>+13.2f} {seconds:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
