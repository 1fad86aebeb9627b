// Your own LibTorch training loop with localsgd (README.md, "Your own training loop"): a model
// and data of your own, a plain loop with gradient accumulation, and two localsgd lines:
// Replica::Connect before the loop, Step() after each optimizer step. Start one process per
// rank as you would for torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) or srun, with
// LOCALSGD_COORDINATOR and LOCALSGD_TOKEN_FILE set, then a run whose spec says
// `model { custom: "..." }`. The task is synthetic (a fixed random teacher labels random
// inputs in 4 classes), so the example needs no files; each rank trains on its own samples.
// With an argument, it writes its final parameters there (raw float32).
#include <torch/torch.h>

#include <cstdio>
#include <fstream>

#include "worker/replica.h"

namespace {

struct Net : torch::nn::Module {
  Net()
      : fc1(register_module("fc1", torch::nn::Linear(20, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, 4))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1, fc2;
};

std::pair<torch::Tensor, torch::Tensor> Samples(int64_t n, uint64_t seed) {
  torch::manual_seed(7);
  const torch::Tensor teacher = torch::randn({20, 4});
  torch::manual_seed(seed);
  torch::Tensor x = torch::randn({n, 20});
  return {x, x.mm(teacher).argmax(1)};
}

}  // namespace

int main(int argc, char** argv) try {
  auto net = std::make_shared<Net>();
  // (1) Join the run: every replica starts from the same initial model.
  auto local_sgd = localsgd::Replica::Connect(net->parameters()).value();

  const localsgd::v1::RunSpec& spec = local_sgd->spec();
  torch::optim::SGD optimizer(net->parameters(),
                              torch::optim::SGDOptions(spec.optimizer().lr()).momentum(0.9));
  auto [train_x, train_y] = Samples(4096, 1000 + local_sgd->rank());
  const int64_t batch = spec.batch_size();
  const int accumulation = spec.gradient_accumulation_steps();
  torch::Tensor loss;
  for (int64_t micro = 0; local_sgd->steps() < spec.total_steps();) {
    for (int a = 0; a < accumulation; ++a, ++micro) {  // gradient accumulation
      const int64_t at = (micro * batch) % (train_x.size(0) - batch);
      loss = torch::nn::functional::cross_entropy(net->forward(train_x.narrow(0, at, batch)),
                                                  train_y.narrow(0, at, batch));
      (loss / accumulation).backward();
    }
    optimizer.step();
    optimizer.zero_grad();
    // (2) Count the optimizer step: every local_sgd_steps of them, the replicas average.
    if (absl::Status s = local_sgd->Step(); !s.ok()) throw std::runtime_error(s.ToString());
    local_sgd->Report(loss.item<double>()).IgnoreError();  // optional: the status page's loss
  }

  // The run's last step synced already: every copy is the run's model.
  auto [test_x, test_y] = Samples(2048, 99);
  torch::NoGradGuard no_grad;
  const torch::Tensor correct = net->forward(test_x).argmax(1).eq(test_y).to(torch::kFloat64);
  local_sgd->Report(loss.item<double>(), correct.mean().item<double>()).IgnoreError();
  local_sgd.reset();  // finishes: the destructor reports, syncs if needed, and leaves
  if (argc > 1) {
    std::ofstream out(argv[1], std::ios::binary);
    for (const torch::Tensor& p : net->parameters()) {
      out.write(reinterpret_cast<const char*>(p.data_ptr<float>()), p.numel() * sizeof(float));
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "custom_loop: %s\n", e.what());
  return 1;
}
