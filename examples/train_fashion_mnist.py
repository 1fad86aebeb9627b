#!/usr/bin/env python3
"""A plain PyTorch training loop on Fashion-MNIST with localsgd: the two lines marked (1) and
(2) are all that differ from the loop without it (README.md, "From Accelerate").

Start it as you would any torchrun script, with the coordinator's address and token:

    LOCALSGD_COORDINATOR=HOST:PORT LOCALSGD_TOKEN_FILE=token \\
        torchrun --nnodes 2 --nproc-per-node 2 ... examples/train_fashion_mnist.py

and start the run (localsgdctl start, or localsgd.Client().start(...)) with
`model { custom: "Net" }`; or pass --start to start one from this script's settings.
Data: Debian's dataset-fashion-mnist (--data).
"""

import argparse
import gzip
import os

import torch
import torch.nn.functional as F

import localsgd


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def load(folder, split):
    images = read_idx(os.path.join(folder, f"{split}-images-idx3-ubyte.gz")).float() / 255
    labels = read_idx(os.path.join(folder, f"{split}-labels-idx1-ubyte.gz")).long()
    return torch.utils.data.TensorDataset((images.reshape(-1, 784) - 0.2860) / 0.3530, labels)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, 256)
        self.fc2 = torch.nn.Linear(256, 128)
        self.fc3 = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--local_sgd_steps", type=int, default=8)
    parser.add_argument("--start", action="store_true",
                        help="start a run from these settings when none is active")
    parser.add_argument("--out", help="save the final parameters here (torch.save)")
    args = parser.parse_args()

    torch.manual_seed(0)  # every rank builds the same model (the run's first leader's wins)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // localsgd.placement()["local_world_size"]))
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train = localsgd.shard(load(args.data, "train"))  # this rank's samples
    loader = torch.utils.data.DataLoader(train, batch_size=args.batch_size, shuffle=True)
    steps = args.epochs * len(loader)

    # (1) Join the run (every copy starts from the same model) ...
    with localsgd.LocalSGD(model=model, local_sgd_steps=args.local_sgd_steps, enabled=True,
                           start_run=args.start,
                           total_steps=steps if args.start else None) as local_sgd:
        for epoch in range(args.epochs):
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                # (2) ... and count the optimizer step: every local_sgd_steps, the copies average.
                local_sgd.step()
                local_sgd.report(loss=loss.item(), samples=len(x))
        test = load(args.data, "t10k")
        with torch.no_grad():
            accuracy = (model(test.tensors[0]).argmax(1) == test.tensors[1]).float().mean().item()
        local_sgd.report(loss=loss.item(), accuracy=accuracy)
        print(f"rank {local_sgd.rank} of {local_sgd.world_size}: {local_sgd.steps} steps, "
              f"{local_sgd.syncs} syncs, test accuracy {accuracy:.4f}", flush=True)
    if args.out:
        torch.save([p.detach() for p in model.parameters()], args.out)


if __name__ == "__main__":
    main()
