#include "worker/worker_flags.h"

#include <torch/cuda.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/client_tls_flags.h"
#include "common/command_line.h"
#include "worker/environment.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051", "The coordinator's gRPC HOST:PORT.");
ABSL_FLAG(std::string, token, "", "Bearer token (prefer --token_file).");
ABSL_FLAG(std::string, token_file, "", "File holding the bearer token.");
ABSL_FLAG(std::string, node_key_file, "",
          "File holding this node's key, for a coordinator that requires one "
          "(--node_key_secret_file there; localsgdctl node_key makes it).");
ABSL_FLAG(std::string, node_name, "", "This node's name (default: the host name).");
ABSL_FLAG(int, node_rank, 0, "This node's index among the run's nodes (data sharding).");
ABSL_FLAG(int, num_nodes, 1, "Number of nodes in the run (data sharding).");
ABSL_FLAG(int, local_rank, 0,
          "This process's rank on its node; rank 0 leads the node (when it dies, the lowest "
          "live rank takes over).");
ABSL_FLAG(int, local_world_size, 1, "Processes (ranks) on this node.");
ABSL_FLAG(bool, ranks_from_environment, false,
          "Take this process's ranks from the launcher's variables instead of --local_rank, "
          "--local_world_size, --node_rank and --num_nodes: srun's (SLURM_PROCID, SLURM_NTASKS, "
          "SLURM_LOCALID, SLURM_NODEID, SLURM_TASKS_PER_NODE) or torchrun's (RANK, WORLD_SIZE, "
          "LOCAL_RANK, LOCAL_WORLD_SIZE). Nodes may then run different numbers of ranks.");
ABSL_FLAG(std::string, device, "cpu",
          "Where to train: cpu, cuda:N, or auto (cuda:LOCAL_RANK when this process sees more CUDA "
          "devices than its local rank, else cpu).");
ABSL_FLAG(int, threads, 0,
          "Threads for one training step on the CPU (LibTorch's intra-op threads). 0: "
          "OMP_NUM_THREADS when set, else this machine's cores divided by --local_world_size "
          "(at least 1), so that the node's ranks do not oversubscribe its cores.");
ABSL_FLAG(std::string, rendezvous_dir, "/tmp",
          "Node-local folder where the node's ranks meet (a folder per run and node).");
ABSL_FLAG(int, log_every, 10, "Print a progress line every this many optimizer steps.");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Minutes(5),
          "How long to keep retrying an unreachable coordinator.");
ABSL_FLAG(std::string, save_model, "",
          "Where node 0's leader (global rank 0 unless it died) writes the trained model at the "
          "end: a TorchScript file for "
          "TorchScript models, else a tensor archive of the named parameters. Empty: nowhere.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Where this node's checkpoints go, a folder of the node's or a path the nodes share "
          "(created if missing): its leader writes the model it holds, with the outer momentum, "
          "round and global step, to <checkpoint_dir>/<node name>/checkpoint.bin at "
          "the run spec's checkpoint_every_rounds / checkpoint_share, off the rounds' path, and "
          "before it leaves; the coordinator's status names the newest. Empty: no checkpoints.");
ABSL_FLAG(int64_t, round_steps, 0,
          "Paced runs (the spec's round_seconds): the optimizer steps this node trains between "
          "two of its rounds, in [1, local_sgd_steps / fragments]; 0: as many as "
          "its measured speed fits in round_seconds. Give every rank of a node the same.");
ABSL_FLAG(std::string, data_address, "0.0.0.0:0",
          "The node's leader: HOST:PORT where this node serves the sharded data plane "
          "to the other node leaders. Port 0 picks a free one; host 0.0.0.0 listens on every "
          "interface and is advertised as the address the coordinator sees this worker join "
          "from. Empty: serve none (the node still takes part but owns no range).");
ABSL_FLAG(std::string, data_tls_cert, "",
          "PEM certificate (chain) of this node's data plane, for the host it is reached at; "
          "with --tls_ca the other node leaders verify it. Without it, under TLS, the node "
          "serves no data plane.");
ABSL_FLAG(std::string, data_tls_key, "", "PEM private key of --data_tls_cert.");

namespace localsgd {
namespace {

// --threads, resolved: the flag, else OMP_NUM_THREADS (LibTorch's own default reads it too),
// else the machine's cores shared among the node's ranks.
int TrainingThreads(int flag, int local_world) {
  if (flag > 0) return flag;
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp != nullptr) {
    int n = 0;
    if (absl::SimpleAtoi(omp, &n) && n > 0) return n;
  }
  const unsigned cores = std::thread::hardware_concurrency();
  return std::max(1, static_cast<int>(cores) / local_world);
}

// --device, resolved for local rank `local_rank`.
absl::StatusOr<torch::Device> DeviceFlag(int local_rank) {
  const std::string flag = absl::GetFlag(FLAGS_device);
  torch::Device device(torch::kCPU);
  if (flag == "auto") {
    // One GPU per rank where the pod or host has them, the CPU where it has none.
    if (torch::cuda::is_available() && local_rank < static_cast<int>(torch::cuda::device_count())) {
      device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
    }
    return device;
  }
  try {
    device = torch::Device(flag);
  } catch (const c10::Error&) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: \"", flag, "\" is not a device (cpu, cuda:N, auto)"));
  }
  if (device.is_cuda() && (!torch::cuda::is_available() ||
                           device.index() >= static_cast<int>(torch::cuda::device_count()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: ", flag, " does not exist on this machine (this LibTorch sees ",
                     torch::cuda::device_count(), " CUDA devices)"));
  }
  return device;
}

}  // namespace

absl::StatusOr<WorkerFlags> ParseWorkerFlags(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "The localsgd worker: trains one rank of a run.\n"
      "Usage: worker --coordinator=HOST:PORT --token_file=FILE --node_name=NAME "
      "[--local_rank=R --local_world_size=N] [--node_rank=I --num_nodes=M] [--device=cpu]");
  HelpShowsTlsFlags("worker_flags");
  std::vector<char*> args = ParseCommandLine(argc, argv);
  if (args.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", args[1], "\" (see --help)"));
  }
  WorkerFlags flags;
  SessionOptions& session = flags.session;
  // Ranks: on the node, and in the whole job.
  session.local_rank = absl::GetFlag(FLAGS_local_rank);
  session.local_world_size = absl::GetFlag(FLAGS_local_world_size);
  const int node_rank = absl::GetFlag(FLAGS_node_rank);
  const int num_nodes = absl::GetFlag(FLAGS_num_nodes);
  if (session.local_world_size < 1 || session.local_rank < 0 ||
      session.local_rank >= session.local_world_size) {
    return absl::InvalidArgumentError("--local_rank must be in [0, --local_world_size)");
  }
  if (num_nodes < 1 || node_rank < 0 || node_rank >= num_nodes) {
    return absl::InvalidArgumentError("--node_rank must be in [0, --num_nodes)");
  }
  session.rank = node_rank * session.local_world_size + session.local_rank;
  session.world_size = num_nodes * session.local_world_size;
  if (absl::GetFlag(FLAGS_ranks_from_environment)) {
    if (!ProcessEnvironment("SLURM_PROCID") && !ProcessEnvironment("RANK")) {
      return absl::InvalidArgumentError(
          "--ranks_from_environment: neither srun's SLURM_PROCID nor torchrun's RANK is set");
    }
    absl::StatusOr<SessionOptions> from = SessionOptionsFromEnvironment();
    if (!from.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ranks_from_environment: ", from.status().message()));
    }
    session.local_rank = from->local_rank;
    session.local_world_size = from->local_world_size;
    session.rank = from->rank;
    session.world_size = from->world_size;
    session.node_name = from->node_name;
  }
  flags.first_node = session.rank - session.local_rank == 0;
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0) return absl::InvalidArgumentError("--threads must be 0 (automatic) or more");
  torch::set_num_threads(TrainingThreads(threads, session.local_world_size));
  absl::StatusOr<torch::Device> device = DeviceFlag(session.local_rank);
  if (!device.ok()) return device.status();
  session.device = *device;
  absl::StatusOr<std::string> token =
      ResolveToken(absl::GetFlag(FLAGS_token), absl::GetFlag(FLAGS_token_file));
  if (!token.ok()) return absl::InvalidArgumentError(token.status().message());
  session.token = *std::move(token);
  if (const std::string file = absl::GetFlag(FLAGS_node_key_file); !file.empty()) {
    absl::StatusOr<std::string> key = ReadSecretFile("--node_key_file", file);
    if (!key.ok()) return absl::InvalidArgumentError(key.status().message());
    session.node_key = *std::move(key);
  }
  if (absl::Status s = ChannelCredentialsFromFlags().status(); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  if (absl::GetFlag(FLAGS_data_tls_cert).empty() != absl::GetFlag(FLAGS_data_tls_key).empty()) {
    return absl::InvalidArgumentError("--data_tls_cert and --data_tls_key: give both or neither");
  }
  session.coordinator = absl::GetFlag(FLAGS_coordinator);
  session.tls = ClientTlsFromFlags();
  if (!absl::GetFlag(FLAGS_node_name).empty()) session.node_name = absl::GetFlag(FLAGS_node_name);
  session.rendezvous_dir = absl::GetFlag(FLAGS_rendezvous_dir);
  session.data_address = absl::GetFlag(FLAGS_data_address);
  session.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  session.data_tls_cert = absl::GetFlag(FLAGS_data_tls_cert);
  session.data_tls_key = absl::GetFlag(FLAGS_data_tls_key);
  session.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  if (absl::GetFlag(FLAGS_round_steps) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--round_steps: must be >= 0, got ", absl::GetFlag(FLAGS_round_steps)));
  }
  session.round_steps = absl::GetFlag(FLAGS_round_steps);
  flags.save_model = absl::GetFlag(FLAGS_save_model);
  flags.log_every = std::max(1, absl::GetFlag(FLAGS_log_every));
  return flags;
}

}  // namespace localsgd
