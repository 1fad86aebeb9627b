"""The part of Accelerate's API that its LocalSGD example loop touches, for tests where the
accelerate package cannot be installed: Accelerator with prepare (a DistributedDataParallel
model over a one-process Gloo group, an optimizer that steps only on accumulation
boundaries), accumulate, backward, sync_gradients, gradient_accumulation_steps, device and
process_index. Behaves as Accelerate 0.2x does for these on one CPU process."""
import contextlib

import torch
import torch.distributed as dist


class _AcceleratedOptimizer:
    def __init__(self, optimizer, accelerator):
        self.optimizer = optimizer
        self._accelerator = accelerator

    def step(self):
        if self._accelerator.sync_gradients:
            self.optimizer.step()

    def zero_grad(self, set_to_none=None):
        if self._accelerator.sync_gradients:
            self.optimizer.zero_grad()


class Accelerator:
    def __init__(self, gradient_accumulation_steps=1, store_path=None):
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.sync_gradients = True
        self.device = torch.device("cpu")
        self.process_index = 0
        self._step = 0
        if not dist.is_initialized():
            dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=0,
                                    world_size=1)

    def prepare(self, model, optimizer, *rest):
        model = torch.nn.parallel.DistributedDataParallel(model)
        return (model, _AcceleratedOptimizer(optimizer, self), *rest)

    @contextlib.contextmanager
    def accumulate(self, model):
        self._step += 1
        self.sync_gradients = self._step % self.gradient_accumulation_steps == 0
        context = contextlib.nullcontext() if self.sync_gradients else model.no_sync()
        with context:
            yield

    def backward(self, loss):
        (loss / self.gradient_accumulation_steps).backward()
