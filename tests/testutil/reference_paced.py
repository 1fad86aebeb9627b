"""A reference implementation of paced rounds (docs/design.md, "Paced rounds"), written from
the algorithm's statement, independently of the worker: one process simulates every rank of
every node on full-batch SGD, each node training its own fixed number of optimizer steps a
round, so that the worker's final model can be compared with it.

  reference_paced.py DATA MODEL OUT --steps_per_node Q0,Q1,... --ranks R --k K --tau T
      --steps S --lr LR [--fragments P --chunk_bytes B --outer_lr L --outer_momentum M
      --nesterov --unweighted]   writes the final global model's values

The algorithm: rounds fall at the run's steps m K / P. Between two of them node n trains
min(Q_n, steps to the next round step, or to S) optimizer steps and then stands at that round
step. A round carries fragment f = (step mod K) / (K / P); each node's delta is its ranks' mean
of the fragment minus G, weighted by its ranks times the optimizer steps it trained since it
last took a delta of that fragment (at most K); the weighted mean goes through the outer step.
With overlap tau the node merges the round after its tau-th optimizer step past it, or after its
last one before the next round step when it trains fewer (or at the run's end):
w <- G' + (w - w_s). At the run's last step S the round in flight is merged and
every fragment not synced at S syncs once more, by the same weights.

DATA and MODEL as reference_overlap.py makes them (its helpers are reused: data, model, flat
vectors, the outer step, fragment slices).
"""
import argparse
import sys

import torch

from reference_overlap import Outer, assign, flat, fragment_slices


def run(args):
    data = torch.load(args.data)
    quotas = [int(q) for q in args.steps_per_node.split(",")]
    nodes = [list(range(n * args.ranks, (n + 1) * args.ranks)) for n in range(len(quotas))]
    world = len(quotas) * args.ranks
    models = [torch.jit.load(args.model) for _ in range(world)]
    params = [list(m.parameters()) for m in models]
    optimizers = [torch.optim.SGD(p, lr=args.lr) for p in params]
    shards = [(data["inputs"][g::world], data["targets"][g::world]) for g in range(world)]
    G = flat(params[0]).clone()
    outer = Outer(args.outer_lr, args.outer_momentum, args.nesterov, G.numel())
    parts = fragment_slices(G.numel(), args.chunk_bytes, args.fragments)
    apart = args.k // args.fragments
    # trained[n][f]: optimizer steps node n trained since it last took a delta of fragment f.
    trained = [[0] * args.fragments for _ in nodes]

    def train(n):
        for g in nodes[n]:
            x, y = shards[g]
            loss = torch.nn.functional.cross_entropy(models[g](x), y)
            loss.backward()
            optimizers[g].step()
            optimizers[g].zero_grad()
        for f in range(args.fragments):
            trained[n][f] += 1

    def commit(f, values):
        """G' of fragment f from each rank's values of it; the nodes' deltas weighed by ranks
        times steps trained (at most K), which are then taken."""
        part = parts[f]
        deltas, weights = [], []
        for n, node in enumerate(nodes):
            deltas.append(torch.stack([values[g] for g in node]).mean(0) - G[part])
            steps = 1 if args.unweighted else min(trained[n][f], args.k)
            weights.append(float(len(node) * steps))
            trained[n][f] = 0
        w = torch.tensor(weights)
        mean_delta = (torch.stack(deltas) * w[:, None]).sum(0) / w.sum()
        return outer.step(G, mean_delta, part)

    def merge(n, pending):
        f, snapshots, new_part = pending
        part = parts[f]
        for g in nodes[n]:
            values = flat(params[g])
            values[part] = new_part + (values[part] - snapshots[g])
            assign(params[g], values)

    pending = None  # (fragment, each rank's snapshot of it, G' of it)
    step = 0  # the run's round step the nodes stand at
    synced_at = [0] * args.fragments
    while step < args.steps:
        window = min(apart, args.steps - step)
        merged = [pending is None] * len(nodes)
        for n, quota in enumerate(quotas):
            for r in range(1, min(quota, window) + 1):
                train(n)
                if not merged[n] and r == args.tau:
                    merge(n, pending)
                    merged[n] = True
        if pending is not None:
            for n in range(len(nodes)):  # fewer than tau steps this round
                if not merged[n]:
                    merge(n, pending)
            G[parts[pending[0]]] = pending[2]
            pending = None
        step += window
        if step % apart != 0:
            break  # the run's last step, not a round step
        f = (step % args.k) // apart
        snapshots = [flat(params[g])[parts[f]].clone() for g in range(world)]
        pending = (f, snapshots, commit(f, snapshots))
        synced_at[f] = step
        if args.tau == 0 or step == args.steps:
            for n in range(len(nodes)):
                merge(n, pending)
            G[parts[f]] = pending[2]
            pending = None
    for f, part in enumerate(parts):  # the last syncs
        if synced_at[f] == args.steps:
            continue
        G[part] = commit(f, [flat(params[g])[part] for g in range(world)])
        for g in range(world):
            values = flat(params[g])
            values[part] = G[part]
            assign(params[g], values)
    torch.save(G, args.out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--steps_per_node", required=True)
    for name, kind, default in (("ranks", int, 2), ("k", int, 4), ("tau", int, 0),
                                ("steps", int, 22), ("lr", float, 0.1), ("outer_lr", float, 1.0),
                                ("outer_momentum", float, 0.0), ("fragments", int, 1),
                                ("chunk_bytes", int, 131072)):
        parser.add_argument(f"--{name}", type=kind, default=default)
    parser.add_argument("--nesterov", action="store_true")
    parser.add_argument("--unweighted", action="store_true",
                        help="weigh each node by its ranks only (a control: what the weights do)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    run(args)


if __name__ == "__main__":
    sys.exit(main())
