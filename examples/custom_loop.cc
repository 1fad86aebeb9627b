// Your own LibTorch training loop with localsgd (README.md, "Your own training loop"): a model
// and data of your own, a plain loop with gradient accumulation, and two localsgd lines: a
// Session from localsgd::Connect, and LocalSGD::Step() after each optimizer step. Start one
// process per rank (like the worker), then a run whose spec says `model { custom: "..." }`:
//
//   custom_loop --coordinator=HOST:PORT --token_file=FILE --node_name=NAME [--node_rank=I]
//
// The task here is synthetic (a fixed random teacher labels random inputs in 4 classes) so
// that the example needs no files; each node trains on its own samples.
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "worker/local_sgd.h"
#include "worker/session.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051", "The coordinator's gRPC HOST:PORT.");
ABSL_FLAG(std::string, token_file, "", "File holding the coordinator's bearer token.");
ABSL_FLAG(std::string, node_name, "", "This node's name (default: the host name).");
ABSL_FLAG(int, node_rank, 0, "This node's index: it picks the node's own training samples.");
ABSL_FLAG(std::string, out, "", "Write the final parameters here (raw float32), if set.");

namespace {

// The user's model: any torch::nn::Module.
struct Net : torch::nn::Module {
  Net()
      : fc1(register_module("fc1", torch::nn::Linear(20, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, 4))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1, fc2;
};

// Inputs and the teacher's labels.
std::pair<torch::Tensor, torch::Tensor> Samples(int64_t n, uint64_t seed) {
  torch::manual_seed(7);
  const torch::Tensor teacher = torch::randn({20, 4});
  torch::manual_seed(seed);
  torch::Tensor x = torch::randn({n, 20});
  return {x, x.mm(teacher).argmax(1)};
}

std::string ReadToken(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) {
    token.pop_back();
  }
  return token;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto net = std::make_shared<Net>();

  localsgd::SessionOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.token = ReadToken(absl::GetFlag(FLAGS_token_file));
  options.node_name = absl::GetFlag(FLAGS_node_name);
  // (1) Join the run: every replica starts from the same initial model.
  absl::StatusOr<std::unique_ptr<localsgd::Session>> session =
      localsgd::Connect(options, net->parameters());
  if (!session.ok()) {
    std::fprintf(stderr, "custom_loop: %s\n", session.status().ToString().c_str());
    return 1;
  }
  const localsgd::v1::RunSpec& spec = (*session)->spec();
  // (2) Average every spec.local_sgd_steps() optimizer steps (overlapped with training when the
  // run says so).
  localsgd::LocalSGD local_sgd(session->get(), net->parameters(), spec.local_sgd_steps(),
                               spec.enabled(), (*session)->first_step(), spec.overlap_steps(),
                               spec.fragments());

  torch::optim::SGD optimizer(net->parameters(),
                              torch::optim::SGDOptions(spec.optimizer().lr()).momentum(0.9));
  auto [train_x, train_y] = Samples(4096, 1000 + absl::GetFlag(FLAGS_node_rank));
  const int64_t batch = spec.batch_size();
  const int accumulation = spec.gradient_accumulation_steps();
  double loss_value = 0;
  int64_t micro = 0;
  while (local_sgd.steps() < spec.total_steps()) {
    for (int a = 0; a < accumulation; ++a, ++micro) {  // gradient accumulation
      const int64_t at = (micro * batch) % (train_x.size(0) - batch);
      torch::Tensor loss = torch::nn::functional::cross_entropy(
          net->forward(train_x.narrow(0, at, batch)), train_y.narrow(0, at, batch));
      (loss / accumulation).backward();
      loss_value = loss.item<double>();
    }
    optimizer.step();
    optimizer.zero_grad();
    if (absl::Status s = local_sgd.Step(); !s.ok()) {  // a failed sync: train on locally
      std::fprintf(stderr, "custom_loop: sync: %s\n", s.ToString().c_str());
    }
    (*session)->coordinator().Report(local_sgd.steps(), loss_value, 0, false, 0);
  }
  if (absl::Status s = local_sgd.Finish(); !s.ok()) {
    std::fprintf(stderr, "custom_loop: last sync: %s\n", s.ToString().c_str());
  }

  auto [test_x, test_y] = Samples(2048, 99);
  torch::NoGradGuard no_grad;
  const double accuracy =
      net->forward(test_x).argmax(1).eq(test_y).to(torch::kFloat64).mean().item<double>();
  std::printf("%s done: %lld steps, loss %.4f, test accuracy %.4f\n",
              (*session)->worker_id().c_str(), static_cast<long long>(local_sgd.steps()),
              loss_value, accuracy);
  if (!absl::GetFlag(FLAGS_out).empty()) {
    std::ofstream out(absl::GetFlag(FLAGS_out), std::ios::binary);
    for (const torch::Tensor& p : net->parameters()) {
      const torch::Tensor c = p.detach().contiguous();
      out.write(reinterpret_cast<const char*>(c.data_ptr<float>()), c.numel() * sizeof(float));
    }
  }
  return (*session)->Finish(local_sgd.steps(), loss_value, 0, accuracy, "finished").ok() ? 0 : 1;
}
