"""A reference implementation of Local SGD with overlapped rounds (docs/design.md,
"Overlapped rounds"), written from the algorithm's statement, independently of the worker: one
process simulates every rank of every node on full-batch SGD, so that the worker's final model
can be compared with it.

  reference_overlap.py make DATA MODEL       writes a tensor-file data set and a TorchScript init
  reference_overlap.py run DATA MODEL OUT --nodes N --ranks R --k K --tau T --steps S --lr LR
      [--outer_lr L --outer_momentum M --nesterov]   writes the final global model's values

Data: rank g = node * R + local rank trains on samples g, g + N*R, ... (the worker's strided
split); its batch is its whole shard, so the order the worker draws samples in does not matter.
"""
import argparse
import sys

import torch


def make(data_path, model_path):
    torch.manual_seed(7)
    inputs = torch.randn(64, 8)
    targets = torch.randint(0, 3, (64,))
    torch.save({"inputs": inputs, "targets": targets, "test_inputs": inputs[:16],
                "test_targets": targets[:16]}, data_path)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    torch.jit.script(model).save(model_path)


def flat(params):
    return torch.cat([p.detach().reshape(-1) for p in params])


def assign(params, values):
    offset = 0
    for p in params:
        n = p.numel()
        p.data.copy_(values[offset:offset + n].view_as(p))
        offset += n


class Outer:
    """OuterStep(G, mean delta): lr, momentum, Nesterov, as in the run spec."""

    def __init__(self, lr, momentum, nesterov, size):
        self.lr, self.mu, self.nesterov = lr, momentum, nesterov
        self.momentum = torch.zeros(size)

    def step(self, global_model, mean_delta):
        if self.mu == 0:
            return global_model + self.lr * mean_delta
        self.momentum = self.mu * self.momentum + mean_delta
        update = mean_delta + self.mu * self.momentum if self.nesterov else self.momentum
        return global_model + self.lr * update


def run(args):
    data = torch.load(args.data)
    world = args.nodes * args.ranks
    models = [torch.jit.load(args.model) for _ in range(world)]
    params = [list(m.parameters()) for m in models]
    optimizers = [torch.optim.SGD(p, lr=args.lr) for p in params]
    shards = [(data["inputs"][g::world], data["targets"][g::world]) for g in range(world)]
    nodes = [list(range(n * args.ranks, (n + 1) * args.ranks)) for n in range(args.nodes)]
    G = flat(params[0]).clone()  # every node's G starts at the initial model
    outer = Outer(args.outer_lr, args.outer_momentum, args.nesterov, G.numel())
    pending = None  # (step s, each rank's snapshot, G')

    def round_from(values):
        """The committed G' of a round whose ranks hold `values` (one flat tensor per rank):
        each node's delta is its ranks' mean minus G, weighted by its ranks."""
        deltas = [torch.stack([values[g] for g in node]).mean(0) - G for node in nodes]
        weights = torch.tensor([float(len(node)) for node in nodes])
        mean_delta = (torch.stack(deltas) * weights[:, None]).sum(0) / weights.sum()
        return outer.step(G, mean_delta)

    def merge():
        nonlocal G, pending
        _, snapshots, new_global = pending
        for g in range(world):
            assign(params[g], new_global + (flat(params[g]) - snapshots[g]))
        G, pending = new_global, None

    last_sync = 0
    for step in range(1, args.steps + 1):
        for g in range(world):
            x, y = shards[g]
            loss = torch.nn.functional.cross_entropy(models[g](x), y)
            loss.backward()
            optimizers[g].step()
            optimizers[g].zero_grad()
        if pending is not None and step == pending[0] + args.tau:
            merge()
        if step % args.k == 0:
            snapshots = [flat(params[g]).clone() for g in range(world)]
            pending = (step, snapshots, round_from(snapshots))
            last_sync = step
            if args.tau == 0:
                merge()
    if pending is not None:  # the run's end: the round in flight first
        merge()
    if last_sync != args.steps:  # then the last sync, as without overlap
        G = round_from([flat(params[g]) for g in range(world)])
        for g in range(world):
            assign(params[g], G)
    torch.save(G, args.out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["make", "run"])
    parser.add_argument("data")
    parser.add_argument("model")
    parser.add_argument("out", nargs="?")
    for name, kind, default in (("nodes", int, 2), ("ranks", int, 2), ("k", int, 4),
                                ("tau", int, 0), ("steps", int, 22), ("lr", float, 0.1),
                                ("outer_lr", float, 1.0), ("outer_momentum", float, 0.0)):
        parser.add_argument(f"--{name}", type=kind, default=default)
    parser.add_argument("--nesterov", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.command == "make":
        make(args.data, args.model)
    else:
        run(args)


if __name__ == "__main__":
    sys.exit(main())
