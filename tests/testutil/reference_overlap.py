"""A reference implementation of Local SGD with overlapped rounds and streaming fragments
(docs/design.md, "Overlapped rounds" and "Streaming fragments"), written from the algorithms'
statements, independently of the worker: one process simulates every rank of every node on
full-batch SGD, so that the worker's final model can be compared with it.

  reference_overlap.py make DATA MODEL [--hidden H]   writes a tensor-file data set and a
                                                      TorchScript init (8-H-3 MLP)
  reference_overlap.py run DATA MODEL OUT --nodes N --ranks R --k K --tau T --steps S --lr LR
      [--outer_lr L --outer_momentum M --nesterov] [--fragments P --chunk_bytes B]
      writes the final global model's values

Fragments: the flat vector in chunks of B / 4 values rounded down to a multiple of 256 (at
least 256); P fragments of whole chunks, fragment f holding chunks [f C / P, (f + 1) C / P) of
C. Fragment f syncs at the steps s with s - f K / P a multiple of K, on its own slice (its own
outer momentum, its own merge tau steps later); at the end, after merging the round in
flight, every fragment not synced at the last step syncs once more.

Data: rank g = node * R + local rank trains on samples g, g + N*R, ... (the worker's strided
split); its batch is its whole shard, so the order the worker draws samples in does not matter.
"""
import argparse
import sys

import torch


def make(data_path, model_path, hidden):
    torch.manual_seed(7)
    inputs = torch.randn(64, 8)
    targets = torch.randint(0, 3, (64,))
    torch.save({"inputs": inputs, "targets": targets, "test_inputs": inputs[:16],
                "test_targets": targets[:16]}, data_path)
    model = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.Tanh(),
                                torch.nn.Linear(hidden, 3))
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

    def step(self, global_model, mean_delta, part):
        """The outer step on slice `part` of the model (its own momentum values)."""
        if self.mu == 0:
            return global_model[part] + self.lr * mean_delta
        self.momentum[part] = self.mu * self.momentum[part] + mean_delta
        momentum = self.momentum[part]
        update = mean_delta + self.mu * momentum if self.nesterov else momentum
        return global_model[part] + self.lr * update


def fragment_slices(size, chunk_bytes, fragments):
    chunk = max(256, chunk_bytes // 4 // 256 * 256)
    chunks = (size + chunk - 1) // chunk
    assert chunks >= fragments, f"{chunks} chunks for {fragments} fragments"
    bounds = [f * chunks // fragments * chunk for f in range(fragments)] + [size]
    return [slice(bounds[f], bounds[f + 1]) for f in range(fragments)]


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
    parts = fragment_slices(G.numel(), args.chunk_bytes, args.fragments)
    apart = args.k // args.fragments  # steps between rounds
    pending = None  # (step s, fragment slice, each rank's snapshot of it, its G')

    def round_from(values, part):
        """The committed G' of slice `part` in a round whose ranks hold `values` (one flat
        tensor per rank, of the slice): each node's delta is its ranks' mean minus G, weighted by
        its ranks."""
        deltas = [torch.stack([values[g] for g in node]).mean(0) - G[part] for node in nodes]
        weights = torch.tensor([float(len(node)) for node in nodes])
        mean_delta = (torch.stack(deltas) * weights[:, None]).sum(0) / weights.sum()
        return outer.step(G, mean_delta, part)

    def merge():
        nonlocal pending
        _, part, snapshots, new_part = pending
        for g in range(world):
            values = flat(params[g])
            values[part] = new_part + (values[part] - snapshots[g])
            assign(params[g], values)
        G[part] = new_part
        pending = None

    last_sync = [0] * args.fragments
    for step in range(1, args.steps + 1):
        for g in range(world):
            x, y = shards[g]
            loss = torch.nn.functional.cross_entropy(models[g](x), y)
            loss.backward()
            optimizers[g].step()
            optimizers[g].zero_grad()
        if pending is not None and step == pending[0] + args.tau:
            merge()
        if step % apart == 0:
            f = (step % args.k) // apart
            part = parts[f]
            snapshots = [flat(params[g])[part].clone() for g in range(world)]
            pending = (step, part, snapshots, round_from(snapshots, part))
            last_sync[f] = step
            if args.tau == 0:
                merge()
    if pending is not None:  # the run's end: the round in flight first
        merge()
    for f, part in enumerate(parts):  # then each fragment's last sync, as without overlap
        if last_sync[f] == args.steps:
            continue
        G[part] = round_from([flat(params[g])[part] for g in range(world)], part)
        for g in range(world):
            values = flat(params[g])
            values[part] = G[part]
            assign(params[g], values)
    torch.save(G, args.out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["make", "run"])
    parser.add_argument("data")
    parser.add_argument("model")
    parser.add_argument("out", nargs="?")
    for name, kind, default in (("nodes", int, 2), ("ranks", int, 2), ("k", int, 4),
                                ("tau", int, 0), ("steps", int, 22), ("lr", float, 0.1),
                                ("outer_lr", float, 1.0), ("outer_momentum", float, 0.0),
                                ("fragments", int, 1), ("chunk_bytes", int, 131072),
                                ("hidden", int, 16)):
        parser.add_argument(f"--{name}", type=kind, default=default)
    parser.add_argument("--nesterov", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.command == "make":
        make(args.data, args.model, args.hidden)
    else:
        run(args)


if __name__ == "__main__":
    sys.exit(main())
