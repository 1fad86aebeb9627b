#include "worker/worker_app.h"

#include <google/protobuf/text_format.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/averaging_client.h"
#include "common/auth.h"
#include "common/client_tls_flags.h"
#include "common/command_line.h"
#include "common/enum_name.h"
#include "common/log.h"
#include "common/malloc_tuning.h"
#include "common/run_spec.h"
#include "common/status_macros.h"
#include "worker/coordinator_client.h"
#include "worker/data_plane_server.h"
#include "worker/dataset.h"
#include "worker/hierarchical_averager.h"
#include "worker/intra_node_averager.h"
#include "worker/model.h"
#include "worker/node_group.h"
#include "worker/node_leader.h"
#include "worker/sharded_client.h"
#include "worker/trainer.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051", "The coordinator's gRPC HOST:PORT.");
ABSL_FLAG(std::string, token, "", "Bearer token (prefer --token_file).");
ABSL_FLAG(std::string, token_file, "", "File holding the bearer token.");
ABSL_FLAG(std::string, node_name, "", "This node's name (default: the host name).");
ABSL_FLAG(int, node_rank, 0, "This node's index among the run's nodes (data sharding).");
ABSL_FLAG(int, num_nodes, 1, "Number of nodes in the run (data sharding).");
ABSL_FLAG(int, local_rank, 0,
          "This process's rank on its node; rank 0 leads the node (when it dies, the lowest "
          "live rank takes over).");
ABSL_FLAG(int, local_world_size, 1, "Processes (ranks) on this node.");
ABSL_FLAG(std::string, device, "cpu", "Where to train: cpu or cuda:N.");
ABSL_FLAG(std::string, rendezvous_dir, "/tmp",
          "Node-local folder where the node's ranks meet (a folder per run and node).");
ABSL_FLAG(int, log_every, 10, "Print a progress line every this many optimizer steps.");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Minutes(5),
          "How long to keep retrying an unreachable coordinator.");
ABSL_FLAG(std::string, save_model, "",
          "Where node 0's leader (global rank 0 unless it died) writes the trained model at the "
          "end: a TorchScript file for "
          "TorchScript models, else a tensor archive of the named parameters. Empty: nowhere.");
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

}  // namespace

int localsgd::RunWorker(int argc, char** argv, const AveragerWrapper& wrap) {
  localsgd::TuneMallocForLargeBuffers();
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
  const int local_rank = absl::GetFlag(FLAGS_local_rank);
  const int local_world = absl::GetFlag(FLAGS_local_world_size);
  const int node_rank = absl::GetFlag(FLAGS_node_rank);
  const int num_nodes = absl::GetFlag(FLAGS_num_nodes);
  if (local_world < 1 || local_rank < 0 || local_rank >= local_world) {
    return UsageError("--local_rank must be in [0, --local_world_size)");
  }
  if (num_nodes < 1 || node_rank < 0 || node_rank >= num_nodes) {
    return UsageError("--node_rank must be in [0, --num_nodes)");
  }
  torch::Device device(torch::kCPU);
  try {
    device = torch::Device(absl::GetFlag(FLAGS_device));
  } catch (const c10::Error&) {
    return UsageError(absl::StrCat("--device: \"", absl::GetFlag(FLAGS_device),
                                   "\" is not a device (cpu, cuda:N)"));
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
  std::string node = absl::GetFlag(FLAGS_node_name);
  if (node.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    node = host;
  }
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      localsgd::ChannelCredentialsFromFlags();
  if (!credentials.ok()) return UsageError(std::string(credentials.status().message()));
  // Whichever rank leads the node (local rank 0, or the rank that takes over when it dies)
  // serves the sharded data plane on its own port, with the coordinator's rules: the bearer
  // token, and TLS (mutual when this worker has a client certificate).
  const std::string data_address = absl::GetFlag(FLAGS_data_address);
  const localsgd::ClientTls client_tls = localsgd::ClientTlsFromFlags();
  const bool tls = !client_tls.ca_file.empty();
  if (absl::GetFlag(FLAGS_data_tls_cert).empty() != absl::GetFlag(FLAGS_data_tls_key).empty()) {
    return UsageError("--data_tls_cert and --data_tls_key: give both or neither");
  }

  localsgd::CoordinatorClient::Options client_options;
  client_options.address = absl::GetFlag(FLAGS_coordinator);
  client_options.credentials = *credentials;
  client_options.token = *token;
  client_options.identity.set_node_name(node);
  client_options.identity.set_local_rank(local_rank);
  client_options.identity.set_local_world_size(local_world);
  client_options.hostname = node;
  client_options.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  client_options.stop = [] { return g_stop.load(); };
  absl::StatusOr<std::unique_ptr<localsgd::CoordinatorClient>> client =
      localsgd::CoordinatorClient::Connect(client_options);
  if (!client.ok()) {
    if (g_stop.load()) {
      localsgd::LogInfo("stopped by signal while connecting to the coordinator");
      return SignalExit();
    }
    return Fail(client.status().ToString());
  }
  localsgd::CoordinatorClient& coordinator = **client;
  auto leave_and_fail = [&](const std::string& message) {
    coordinator.Leave(absl::StrCat("failed: ", message)).IgnoreError();
    return Fail(message);
  };
  localsgd::LogInfo(absl::StrCat("joined as ", coordinator.worker_id(), "; waiting for a run"));

  // A signal at any stage before training: leave, say so once, exit 128 + signal.
  auto stopped_by_signal = [&] {
    localsgd::LogInfo("stopped by signal before training");
    coordinator.Leave("stopped by signal").IgnoreError();
    return SignalExit();
  };
  absl::StatusOr<localsgd::v1::RunInfo> run = coordinator.WaitForRun([] { return g_stop.load(); });
  if (!run.ok() && g_stop.load()) return stopped_by_signal();
  if (!run.ok()) return leave_and_fail(run.status().ToString());
  // Training stops on a signal, and when an operator stops the run (or it failed): no worker
  // trains on alone for a run that has ended.
  const std::string run_id = run->run_id();
  auto run_halted = [&] {
    const localsgd::v1::RunInfo now = coordinator.run();
    return now.run_id() == run_id && (now.state() == localsgd::v1::RUN_STATE_STOPPED ||
                                      now.state() == localsgd::v1::RUN_STATE_FAILED);
  };
  // Before training starts, any end of the run (completed too: the other nodes finished it
  // while this worker was starting) means there is nothing left to do.
  auto run_ended = [&] {
    const localsgd::v1::RunInfo now = coordinator.run();
    return now.run_id() == run_id &&
           (run_halted() || now.state() == localsgd::v1::RUN_STATE_COMPLETED);
  };
  auto ended_before_training = [&] {
    std::printf("%s: run %s ended (%s) before this worker began training\n",
                coordinator.worker_id().c_str(), run_id.c_str(),
                localsgd::EnumName(coordinator.run().state()).c_str());
    coordinator.Leave("the run ended before this worker began").IgnoreError();
    return 0;
  };
  absl::StatusOr<localsgd::v1::RunSpec> spec = localsgd::NormalizeRunSpec(run->spec());
  if (!spec.ok()) return leave_and_fail(spec.status().ToString());
  localsgd::LogInfo(absl::StrCat("run ", run->run_id(), " (", spec->name(), ")"));

  absl::StatusOr<std::unique_ptr<localsgd::Model>> model =
      localsgd::MakeModel(spec->model(), spec->seed());
  if (!model.ok()) return leave_and_fail(model.status().ToString());
  (*model)->To(device);
  absl::StatusOr<localsgd::DataSplits> data = localsgd::LoadData(spec->dataset(), spec->seed());
  if (!data.ok()) return leave_and_fail(data.status().ToString());

  // The node's ranks average with NCCL on GPUs and Gloo on CPUs, meeting in a node-local
  // folder named after the run and the node; they re-form there when one of them dies.
  const absl::Duration timeout = absl::Seconds(spec->round_deadline_seconds() * 2 + 60);
  localsgd::NodeGroup::Factory factory = [&](const std::string& store, int rank, int size,
                                             std::function<bool()> peers_alive) {
    return device.is_cuda() ? localsgd::MakeNcclAverager(store, rank, size, device.index(), timeout,
                                                         std::move(peers_alive))
                            : localsgd::MakeGlooAverager(store, rank, size, timeout);
  };
  absl::StatusOr<std::unique_ptr<localsgd::NodeGroup>> group = localsgd::NodeGroup::Form(
      absl::StrCat(absl::GetFlag(FLAGS_rendezvous_dir), "/localsgd-", run->run_id(), "-", node),
      local_rank, local_world, timeout, factory, [&] { return g_stop.load() || run_ended(); });
  if (!group.ok()) {
    if (g_stop.load()) return stopped_by_signal();
    coordinator.Flush().IgnoreError();
    if (run_ended()) return ended_before_training();
    return leave_and_fail(group.status().ToString());
  }
  std::vector<at::Tensor> tensors = localsgd::ModelTensors(**model, spec->average_buffers());
  localsgd::AveragingClient averaging(coordinator.channel(), *token);
  // Taking the node's lead (at the start, or in place of a leader that died): the data plane,
  // the claim at the coordinator, and the leader's side of the rounds.
  std::unique_ptr<localsgd::DataPlaneServer> data_plane;
  std::unique_ptr<localsgd::ShardedClient> sharded;
  std::unique_ptr<localsgd::NodeLeader> leader;
  const bool sharded_exchange = spec->exchange() == localsgd::v1::EXCHANGE_SHARDED;
  auto take_lead = [&](const std::string& replaces) -> absl::StatusOr<localsgd::NodeLeader*> {
    if (sharded_exchange && !data_address.empty() && data_plane == nullptr) {
      if (tls && absl::GetFlag(FLAGS_data_tls_cert).empty()) {
        localsgd::LogWarning(
            "no sharded data plane: under TLS a node leader needs --data_tls_cert and "
            "--data_tls_key (this node takes part in rounds but owns no range)");
      } else {
        localsgd::DataPlaneServer::Options data_options;
        data_options.address = data_address;
        data_options.token = *token;
        data_options.tls.cert_file = absl::GetFlag(FLAGS_data_tls_cert);
        data_options.tls.key_file = absl::GetFlag(FLAGS_data_tls_key);
        if (tls && !client_tls.cert_file.empty()) {
          data_options.tls.client_ca_file = client_tls.ca_file;
        }
        LOCALSGD_ASSIGN_OR_RETURN(std::unique_ptr<localsgd::DataPlaneServer> started,
                                  localsgd::DataPlaneServer::Start(data_options));
        data_plane = std::move(started);
        localsgd::LogInfo(absl::StrCat("data plane listening on ", data_plane->address()));
      }
    }
    // A claim that does not get through is sent again with the heartbeats.
    if (absl::Status s =
            coordinator.ClaimNodeLead(replaces, data_plane != nullptr ? data_plane->address() : "");
        !s.ok()) {
      localsgd::LogWarning(absl::StrCat("claiming the node's lead: ", s.ToString(),
                                        " (retried with the heartbeats)"));
    }
    const int ranks = static_cast<int>((*group)->members().size());
    localsgd::AveragingClient::Member member{run->run_id(), coordinator.worker_id(), spec->codec(),
                                             static_cast<double>(ranks), ranks};
    leader = std::make_unique<localsgd::NodeLeader>(
        &averaging, member,
        localsgd::ChunkLayout::ForBytes(localsgd::NumValues(tensors), spec->chunk_bytes()),
        // Sharded rounds gather, then exchange, each within the deadline.
        absl::Seconds(2 * spec->round_deadline_seconds() + 30));
    if (sharded_exchange) {
      localsgd::ShardedClient::Options sharded_options;
      sharded_options.coordinator = coordinator.channel();
      sharded_options.token = *token;
      sharded_options.peer_credentials = *credentials;
      sharded_options.owner = data_plane != nullptr ? data_plane->owner() : nullptr;
      sharded = std::make_unique<localsgd::ShardedClient>(sharded_options);
      const localsgd::v1::OuterOptimizerSpec& outer = spec->outer_optimizer();
      leader->UseShardedExchange(
          sharded.get(), localsgd::OuterOptimizer{outer.lr(), outer.momentum(), outer.nesterov()});
    }
    return leader.get();
  };
  localsgd::NodeLeader* first_leader = nullptr;
  if (spec->enabled() && (*group)->members().front() == local_rank) {
    absl::StatusOr<localsgd::NodeLeader*> taken = take_lead("");
    if (!taken.ok()) return leave_and_fail(taken.status().ToString());
    first_leader = *taken;
  }
  localsgd::HierarchicalAverager::TakeLead take_over;
  if (spec->enabled()) {
    take_over = [&](int dead_rank) { return take_lead(absl::StrCat(node, "/", dead_rank)); };
  }
  localsgd::HierarchicalAverager hierarchical(group->get(), first_leader, take_over);
  int64_t first_step = 0;
  if (spec->enabled()) {
    absl::StatusOr<int64_t> resume_at = hierarchical.Start(tensors);
    if (!resume_at.ok()) {
      if (g_stop.load()) return stopped_by_signal();
      // The run stopped before this worker began (it started just then): not a failure.
      coordinator.Flush().IgnoreError();
      if (run_ended()) return ended_before_training();
      return leave_and_fail(absl::StrCat("initial model: ", resume_at.status().ToString()));
    }
    // A run in progress (this worker restarted, or joined late): go on from its global step,
    // on a sync boundary.
    first_step = *resume_at / spec->local_sgd_steps() * spec->local_sgd_steps();
    if (first_step > 0) {
      localsgd::LogInfo(absl::StrCat("the run is at global step ", *resume_at,
                                     "; resuming from the global model at step ", first_step));
    }
  }
  std::unique_ptr<localsgd::ParameterAverager> wrapped;
  localsgd::ParameterAverager* averager = &hierarchical;
  if (wrap) {
    wrapped = wrap(&hierarchical, absl::StrCat(node, "-", local_rank));
    if (wrapped != nullptr) averager = wrapped.get();
  }

  localsgd::TrainOptions options;
  options.spec = *spec;
  options.device = device;
  options.global_rank = node_rank * local_world + local_rank;
  options.world_size = num_nodes * local_world;
  options.first_step = first_step;
  // The run's state is looked at every 100 ms, not on every step (it is a copy under a lock).
  absl::Time next_look = absl::InfinitePast();
  bool halted = false;
  options.stop = [&] {
    if (g_stop.load()) return true;
    if (const absl::Time now = absl::Now(); now >= next_look) {
      halted = run_halted();
      next_look = now + absl::Milliseconds(100);
    }
    return halted;
  };
  const int log_every = std::max(1, absl::GetFlag(FLAGS_log_every));
  double last_round = 0;
  double test_accuracy = 0;
  options.on_progress = [&](const localsgd::TrainProgress& p) {
    if (p.evaluated) {
      test_accuracy = p.test_accuracy;
      std::printf("%s step %lld: test accuracy %.4f, test loss %.4f after %.1f s of training\n",
                  coordinator.worker_id().c_str(), static_cast<long long>(p.step), p.test_accuracy,
                  p.test_loss, p.elapsed_seconds);
    }
    coordinator.ReportTotalSteps(p.total_steps);
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
                  coordinator.worker_id().c_str(), static_cast<long long>(p.step),
                  static_cast<long long>(p.total_steps), p.loss, p.samples_per_second, last_round);
      std::fflush(stdout);
    }
  };
  absl::StatusOr<localsgd::TrainResult> result = localsgd::Train(**model, *data, averager, options);
  if (!result.ok()) return leave_and_fail(result.status().ToString());
  std::printf(
      "%s done: %lld steps, loss %.4f, test accuracy %.4f, test loss %.4f, samples/s %.1f%s\n",
      coordinator.worker_id().c_str(), static_cast<long long>(result->steps), result->loss,
      result->test_accuracy, result->test_loss, result->samples_per_second,
      result->stopped     ? " (stopped early)"
      : result->run_ended ? " (the run ended first; this is its final model)"
                          : "");
  std::fflush(stdout);
  const std::string save_path = absl::GetFlag(FLAGS_save_model);
  // Node 0's leader saves (local rank 0, or the rank that took over from it).
  const bool saver = node_rank == 0 && (spec->enabled() ? leader != nullptr : local_rank == 0);
  if (!save_path.empty() && saver) {
    // After the last sync every replica holds the final global model (averaging runs).
    // Which global model this is: the round and step the node leader last agreed on.
    localsgd::Model::SaveInfo info;
    info.run_id = run->run_id();
    if (leader != nullptr) {
      info.round = leader->round();
      info.global_step = leader->global_step();
    }
    // Raw inputs go into the saved model (its normalisation inside); the spec and the final
    // metrics go beside it.
    const localsgd::InputNormalization normalization = localsgd::NormalizationOf(spec->dataset());
    info.input_divisor = normalization.divisor;
    info.input_mean = normalization.mean;
    info.input_std = normalization.std;
    google::protobuf::TextFormat::PrintToString(*spec, &info.extra_files["spec.textproto"]);
    info.extra_files["metrics.txt"] =
        absl::StrFormat("steps: %d\ntrain_loss: %.6f\ntest_accuracy: %.6f\ntest_loss: %.6f\n",
                        result->steps, result->loss, result->test_accuracy, result->test_loss);
    if (absl::Status s = (*model)->Save(save_path, info); !s.ok()) {
      return leave_and_fail(s.ToString());
    }
    std::printf("%s saved the trained model (run %s, round %lld, global step %lld) to %s\n",
                coordinator.worker_id().c_str(), info.run_id.c_str(),
                static_cast<long long>(info.round), static_cast<long long>(info.global_step),
                save_path.c_str());
    std::fflush(stdout);
    coordinator.ReportModelPath(save_path);
  }
  coordinator.Report(result->steps, result->loss, result->samples_per_second, true,
                     result->test_accuracy);
  coordinator.Flush().IgnoreError();  // the final report, at once
  // Stay a member until the run ends, so that the run can see every worker finished.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (!result->stopped && !g_stop.load() &&
         coordinator.run().state() == localsgd::v1::RUN_STATE_RUNNING && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  coordinator
      .Leave(!result->stopped ? "finished"
             : g_stop.load()  ? "stopped by signal"
                              : "the run was stopped")
      .IgnoreError();
  return result->stopped && g_stop.load() ? SignalExit() : 0;
}
