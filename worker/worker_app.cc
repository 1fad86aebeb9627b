#include "worker/worker_app.h"

#include <google/protobuf/text_format.h>
#include <signal.h>
#include <torch/cuda.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/client_tls_flags.h"
#include "common/command_line.h"
#include "common/enum_name.h"
#include "common/log.h"
#include "common/process_tuning.h"
#include "common/run_spec.h"
#include "common/status_macros.h"
#include "worker/dataset.h"
#include "worker/environment.h"
#include "worker/model.h"
#include "worker/session.h"
#include "worker/trainer.h"

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

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

void OnSignal(int sig) {
  g_signal.store(sig);
  g_stop.store(true);
}

// A worker stopped by SIGTERM or SIGINT exits 128 + the signal's number after leaving, so that
// a job runner (srun, a Kubernetes Job, a shell) does not count it as a success.
int SignalExit() { return 128 + g_signal.load(); }

// Errors are printed once, as a log line on stderr.
int Fail(const std::string& message) {
  localsgd::LogError(message);
  return 1;
}

// A flag that is wrong: exit 2, like any usage error.
int UsageError(const std::string& message) {
  localsgd::LogError(message);
  return 2;
}

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

}  // namespace

int localsgd::RunWorker(int argc, char** argv, const AveragerWrapper& wrap) {
  localsgd::TuneProcess();
  absl::SetProgramUsageMessage(
      "The localsgd worker: trains one rank of a run.\n"
      "Usage: worker --coordinator=HOST:PORT --token_file=FILE --node_name=NAME "
      "[--local_rank=R --local_world_size=N] [--node_rank=I --num_nodes=M] [--device=cpu]");
  localsgd::HelpShowsTlsFlags("worker_app");
  std::vector<char*> args = localsgd::ParseCommandLine(argc, argv);
  if (args.size() > 1) {
    std::fprintf(stderr, "worker: unexpected argument \"%s\" (see --help)\n", args[1]);
    return 2;
  }
  // Ranks: on the node, and in the whole job (global rank 0's node saves the model).
  int local_rank = absl::GetFlag(FLAGS_local_rank);
  int local_world = absl::GetFlag(FLAGS_local_world_size);
  const int node_rank = absl::GetFlag(FLAGS_node_rank);
  const int num_nodes = absl::GetFlag(FLAGS_num_nodes);
  if (local_world < 1 || local_rank < 0 || local_rank >= local_world) {
    return UsageError("--local_rank must be in [0, --local_world_size)");
  }
  if (num_nodes < 1 || node_rank < 0 || node_rank >= num_nodes) {
    return UsageError("--node_rank must be in [0, --num_nodes)");
  }
  int rank = node_rank * local_world + local_rank;
  int world_size = num_nodes * local_world;
  std::string environment_node_name;
  if (absl::GetFlag(FLAGS_ranks_from_environment)) {
    if (!localsgd::ProcessEnvironment("SLURM_PROCID") && !localsgd::ProcessEnvironment("RANK")) {
      return UsageError(
          "--ranks_from_environment: neither srun's SLURM_PROCID nor torchrun's RANK is set");
    }
    absl::StatusOr<localsgd::SessionOptions> from = localsgd::SessionOptionsFromEnvironment();
    if (!from.ok()) {
      return UsageError(absl::StrCat("--ranks_from_environment: ", from.status().message()));
    }
    local_rank = from->local_rank;
    local_world = from->local_world_size;
    rank = from->rank;
    world_size = from->world_size;
    environment_node_name = from->node_name;
  }
  // Ranks are numbered node by node, so the node holding global rank 0 is the one whose ranks
  // start there.
  const bool first_node = rank - local_rank == 0;
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0) return UsageError("--threads must be 0 (automatic) or more");
  torch::set_num_threads(TrainingThreads(threads, local_world));
  torch::Device device(torch::kCPU);
  const std::string device_flag = absl::GetFlag(FLAGS_device);
  if (device_flag == "auto") {
    // One GPU per rank where the pod or host has them, the CPU where it has none.
    if (torch::cuda::is_available() && local_rank < static_cast<int>(torch::cuda::device_count())) {
      device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
    }
  } else {
    try {
      device = torch::Device(device_flag);
    } catch (const c10::Error&) {
      return UsageError(
          absl::StrCat("--device: \"", device_flag, "\" is not a device (cpu, cuda:N, auto)"));
    }
  }
  if (device.is_cuda() && (!torch::cuda::is_available() ||
                           device.index() >= static_cast<int>(torch::cuda::device_count()))) {
    return UsageError(absl::StrCat("--device: ", absl::GetFlag(FLAGS_device),
                                   " does not exist on this machine (this LibTorch sees ",
                                   torch::cuda::device_count(), " CUDA devices)"));
  }
  absl::StatusOr<std::string> token =
      localsgd::ResolveToken(absl::GetFlag(FLAGS_token), absl::GetFlag(FLAGS_token_file));
  if (!token.ok()) return UsageError(std::string(token.status().message()));
  std::string node_key;
  if (const std::string file = absl::GetFlag(FLAGS_node_key_file); !file.empty()) {
    absl::StatusOr<std::string> key = localsgd::ReadSecretFile("--node_key_file", file);
    if (!key.ok()) return UsageError(std::string(key.status().message()));
    node_key = *std::move(key);
  }
  if (absl::Status s = localsgd::ChannelCredentialsFromFlags().status(); !s.ok()) {
    return UsageError(std::string(s.message()));
  }
  if (absl::GetFlag(FLAGS_data_tls_cert).empty() != absl::GetFlag(FLAGS_data_tls_key).empty()) {
    return UsageError("--data_tls_cert and --data_tls_key: give both or neither");
  }
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  localsgd::SessionOptions session_options;
  session_options.coordinator = absl::GetFlag(FLAGS_coordinator);
  session_options.token = *token;
  session_options.node_key = std::move(node_key);
  session_options.tls = localsgd::ClientTlsFromFlags();
  session_options.node_name = absl::GetFlag(FLAGS_node_name).empty()
                                  ? environment_node_name
                                  : absl::GetFlag(FLAGS_node_name);
  session_options.local_rank = local_rank;
  session_options.local_world_size = local_world;
  session_options.rank = rank;
  session_options.world_size = world_size;
  session_options.device = device;
  session_options.rendezvous_dir = absl::GetFlag(FLAGS_rendezvous_dir);
  session_options.data_address = absl::GetFlag(FLAGS_data_address);
  session_options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  session_options.data_tls_cert = absl::GetFlag(FLAGS_data_tls_cert);
  session_options.data_tls_key = absl::GetFlag(FLAGS_data_tls_key);
  session_options.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  session_options.stop = [] { return g_stop.load(); };
  // Joins and waits for a run; it has left the coordinator when this fails.
  absl::StatusOr<std::unique_ptr<localsgd::Session>> joined =
      localsgd::Session::Join(session_options);
  if (!joined.ok()) {
    if (g_stop.load()) {
      localsgd::LogInfo("stopped by signal before training");
      return SignalExit();
    }
    return Fail(joined.status().ToString());
  }
  localsgd::Session& session = **joined;
  const std::string& worker_id = session.worker_id();
  const localsgd::v1::RunSpec& spec = session.spec();
  auto leave_and_fail = [&](const std::string& message) {
    session.Leave(absl::StrCat("failed: ", message), Session::Departure::kFailed).IgnoreError();
    return Fail(message);
  };
  const std::string save_path = absl::GetFlag(FLAGS_save_model);
  // Saves `model`, the global model of `round` at `global_step` (after the last sync every
  // replica holds it), with the spec and `result`'s metrics beside it, and tells the
  // coordinator where.
  auto save = [&](localsgd::Model& model, int64_t round, int64_t global_step,
                  const localsgd::TrainResult& result) -> absl::Status {
    localsgd::Model::SaveInfo info;
    info.run_id = session.run_id();
    info.round = round;
    info.global_step = global_step;
    // Raw inputs go into the saved model (its normalisation inside); the spec and the final
    // metrics go beside it.
    const localsgd::InputNormalization normalization = localsgd::NormalizationOf(spec.dataset());
    info.input_divisor = normalization.divisor;
    info.input_mean = normalization.mean;
    info.input_std = normalization.std;
    google::protobuf::TextFormat::PrintToString(spec, &info.extra_files["spec.textproto"]);
    info.extra_files["metrics.txt"] =
        absl::StrFormat("steps: %d\ntrain_loss: %.6f\ntest_accuracy: %.6f\ntest_loss: %.6f\n",
                        result.steps, result.loss, result.test_accuracy, result.test_loss);
    LOCALSGD_RETURN_IF_ERROR(model.Save(save_path, info));
    std::printf("%s saved the trained model (run %s, round %lld, global step %lld) to %s\n",
                worker_id.c_str(), info.run_id.c_str(), static_cast<long long>(info.round),
                static_cast<long long>(info.global_step), save_path.c_str());
    std::fflush(stdout);
    session.coordinator().ReportModelPath(save_path);
    return absl::OkStatus();
  };
  absl::StatusOr<std::unique_ptr<localsgd::Model>> model =
      localsgd::MakeModel(spec.model(), spec.seed());
  if (!model.ok()) return leave_and_fail(model.status().ToString());
  (*model)->To(device);
  localsgd::LogInfo(absl::StrCat(worker_id, " trains on ", device.str()));
  absl::StatusOr<localsgd::DataSplits> data = localsgd::LoadData(spec.dataset(), spec.seed());
  if (!data.ok()) return leave_and_fail(data.status().ToString());
  // Saves the run's last committed global model (its final one once the run ended), fetched
  // into `model` and evaluated there, for a rank whose own weights are not it (it began too
  // late to train, or the run stopped before its last sync). `result`: the rank's training.
  auto save_committed = [&](localsgd::TrainResult result) -> absl::Status {
    absl::StatusOr<localsgd::Session::CommittedModel> committed =
        session.FetchCommittedModel(localsgd::ModelTensors(**model, spec.average_buffers()));
    if (!committed.ok()) return committed.status();
    try {
      const localsgd::Evaluation e = localsgd::Evaluate(**model, data->test, device, spec.loss());
      result.test_accuracy = e.accuracy;
      result.test_loss = e.loss;
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("evaluating the run's model: ", e.what()));
    }
    return save(**model, committed->round, committed->global_step, result);
  };
  // A signal at any stage before training: leave, say so once, exit 128 + signal. Any end of
  // the run before training (completed too: the other nodes finished it while this worker was
  // starting) means there is nothing left to train.
  auto not_training = [&](const absl::Status& status) {
    if (g_stop.load()) {
      localsgd::LogInfo("stopped by signal before training");
      session.Leave("stopped by signal", Session::Departure::kPreempted).IgnoreError();
      return SignalExit();
    }
    if (session.RunEnded()) {
      std::printf("%s: run %s ended (%s) before this worker began training\n", worker_id.c_str(),
                  session.run_id().c_str(),
                  localsgd::EnumName(session.coordinator().run().state()).c_str());
      // The first node (restarted, or late) still saves a completed run's final global model.
      const bool completed =
          session.coordinator().run().state() == localsgd::v1::RUN_STATE_COMPLETED;
      if (completed && spec.enabled() && !save_path.empty() && first_node &&
          (session.leads_node() || local_rank == 0)) {
        if (absl::Status s = save_committed(localsgd::TrainResult()); !s.ok()) {
          return leave_and_fail(s.ToString());
        }
      }
      session.Leave("the run ended before this worker began").IgnoreError();
      return 0;
    }
    return leave_and_fail(status.ToString());
  };

  if (absl::Status s = session.FormNodeGroup(); !s.ok()) return not_training(s);
  absl::StatusOr<int64_t> first_step =
      session.Start(localsgd::ModelTensors(**model, spec.average_buffers()));
  if (!first_step.ok()) return not_training(first_step.status());

  std::unique_ptr<localsgd::ParameterAverager> wrapped;
  localsgd::ParameterAverager* averager = &session;
  if (wrap) {
    wrapped = wrap(&session, absl::StrCat(session.node_name(), "-", local_rank));
    if (wrapped != nullptr) averager = wrapped.get();
  }

  localsgd::TrainOptions options;
  options.spec = spec;
  options.schedule = session.schedule();
  options.device = device;
  options.global_rank = session.rank();
  options.world_size = session.world_size();
  options.first_step = *first_step;
  // The run's state is looked at every 100 ms, not on every step (it is a copy under a lock).
  absl::Time next_look = absl::InfinitePast();
  bool halted = false;
  options.stop = [&] {
    if (g_stop.load()) return true;
    if (const absl::Time now = absl::Now(); now >= next_look) {
      halted = session.RunHalted();
      next_look = now + absl::Milliseconds(100);
    }
    return halted;
  };
  const int log_every = std::max(1, absl::GetFlag(FLAGS_log_every));
  double last_round = 0;
  double test_accuracy = 0;
  localsgd::CoordinatorClient& coordinator = session.coordinator();
  options.on_wait = [&](int64_t step, int64_t unsynced_steps) {
    coordinator.ReportUnsynced(step, unsynced_steps);
  };
  options.on_progress = [&](const localsgd::TrainProgress& p) {
    if (p.evaluated) {
      test_accuracy = p.test_accuracy;
      std::printf("%s step %lld: test accuracy %.4f, test loss %.4f after %.1f s of training\n",
                  worker_id.c_str(), static_cast<long long>(p.step), p.test_accuracy, p.test_loss,
                  p.elapsed_seconds);
    }
    coordinator.ReportTotalSteps(p.total_steps);
    coordinator.ReportUnsynced(p.step, p.unsynced_steps);
    coordinator.Report(p.step, p.loss, p.samples_per_second, false, test_accuracy);
    if (p.synced) {
      last_round = p.sync_seconds;
      if (absl::IsOutOfRange(p.sync_status)) {
        localsgd::LogInfo(absl::StrCat("sync at step ", p.step, ": ", p.sync_status.message()));
      } else if (!p.sync_status.ok()) {
        localsgd::LogWarning(absl::StrCat("sync at step ", p.step, ": ", p.sync_status.ToString(),
                                          " (training goes on with local weights)"));
      }
    }
    if (p.step % log_every == 0 || p.step == p.total_steps) {
      std::printf("%s step %lld/%lld loss %.4f samples/s %.1f last round %.3f s\n",
                  worker_id.c_str(), static_cast<long long>(p.step),
                  static_cast<long long>(p.total_steps), p.loss, p.samples_per_second, last_round);
      std::fflush(stdout);
    }
  };
  absl::StatusOr<localsgd::TrainResult> result = localsgd::Train(**model, *data, averager, options);
  if (!result.ok()) return leave_and_fail(result.status().ToString());
  std::printf(
      "%s done: %lld steps, loss %.4f, test accuracy %.4f, test loss %.4f, samples/s %.1f%s\n",
      worker_id.c_str(), static_cast<long long>(result->steps), result->loss, result->test_accuracy,
      result->test_loss, result->samples_per_second,
      result->stopped     ? " (stopped early)"
      : result->run_ended ? " (the run ended first; this is its final model)"
                          : "");
  std::fflush(stdout);
  // The first node's leader saves (local rank 0, or the rank that took over from it): the
  // run's global model. After the run's last sync every rank holds it; a run stopped (or a
  // rank preempted) before that leaves the rank on its own weights, so the committed model is
  // fetched instead.
  if (!save_path.empty() && first_node &&
      (spec.enabled() ? session.leads_node() : local_rank == 0)) {
    const absl::Status s = spec.enabled() && result->stopped
                               ? save_committed(*result)
                               : save(**model, session.round(), session.global_step(), *result);
    if (!s.ok()) return leave_and_fail(s.ToString());
  }
  using Ending = localsgd::Session::Ending;
  const Ending ending = !result->stopped ? Ending::kFinished
                        : g_stop.load()  ? Ending::kPreempted
                                         : Ending::kStopped;
  session
      .Finish(result->steps, result->loss, result->samples_per_second, result->test_accuracy,
              ending == Ending::kFinished    ? "finished"
              : ending == Ending::kPreempted ? "stopped by signal"
                                             : "the run was stopped",
              ending)
      .IgnoreError();
  return result->stopped && g_stop.load() ? SignalExit() : 0;
}
