"""Accelerate's LocalSGD example loop (examples/by_feature/local_sgd.py, cut to a small model
and synthetic data), with the two lines localsgd changes marked; run by
accelerate_loop_test.sh."""
import sys

import torch
import torch.nn.functional as F

from accelerate_stand_in import Accelerator
from localsgd import LocalSGD  # changed: was `from accelerate.local_sgd import LocalSGD`

work = sys.argv[1]
torch.manual_seed(0)
accelerator = Accelerator(gradient_accumulation_steps=2, store_path=f"{work}/dist-store")
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(96)]
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=48)
model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)

micro_batches = 0
optimizer_steps = 0
# changed: the run's settings for a quick try (start_run, total_steps); an operator's run needs
# only the same arguments as Accelerate's.
with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=8, enabled=True,
              start_run=True, total_steps=48) as local_sgd:
    for x, y in data:
        with accelerator.accumulate(model):
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            micro_batches += 1
            optimizer_steps += accelerator.sync_gradients
            local_sgd.step()
    # DDP's all-reduce was off inside the block (no_sync), as with Accelerate's LocalSGD.
    assert not model.require_backward_grad_sync, "DDP synchronised gradients inside the block"
print(f"optimizer steps {optimizer_steps}, localsgd steps {local_sgd.steps}, "
      f"syncs {local_sgd.syncs}, micro-batches {micro_batches}")
