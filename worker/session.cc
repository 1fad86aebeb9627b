#include "worker/session.h"

#include <torch/types.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/address.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/model_store.h"
#include "common/retry.h"
#include "common/run_spec.h"
#include "common/status_macros.h"
#include "exchange/checkpointer.h"
#include "exchange/data_plane_server.h"
#include "exchange/held_model.h"
#include "exchange/model_client.h"
#include "exchange/model_fetcher.h"
#include "exchange/sharded_exchange.h"
#include "exchange/star_exchange.h"
#include "worker/flat_model.h"
#include "worker/hierarchical_averager.h"
#include "worker/intra_node_averager.h"
#include "worker/members_behind.h"
#include "worker/model.h"
#include "worker/node_group.h"
#include "worker/node_leader.h"

namespace localsgd {
namespace {

// The longest a node leader holding a run's final model serves it to members behind it.
constexpr absl::Duration kServeFinalModel = absl::Seconds(30);

// The folder, in --rendezvous_dir, where a node's ranks meet for one run.
std::string NodeFolderName(const std::string& run_id, const std::string& node_name) {
  return absl::StrCat("localsgd-", run_id, "-", node_name);
}

}  // namespace

Session::Session(SessionOptions options, std::unique_ptr<CoordinatorClient> coordinator)
    : options_(std::move(options)), coordinator_(std::move(coordinator)) {}

Session::~Session() {
  // A run that has ended (or that the coordinator has replaced with another) needs its node
  // folder no more: the last of the node's ranks to go removes it. A run going on keeps it,
  // for a rank started again.
  const std::string now = coordinator_->run().run_id();
  if (!RunEnded() && (now.empty() || now == run_id_)) return;
  if (group_ != nullptr) {
    group_->RemoveFolderOnLeaving();
  } else {
    NodeGroup::RemoveFolderIfUnused(NodeFolder());
  }
  // And the folders of earlier runs whose last rank was killed after this run's group formed
  // (the sweep in FormNodeGroup found them still in use).
  NodeGroup::RemoveUnusedFolders(options_.rendezvous_dir, "localsgd-",
                                 absl::StrCat("-", options_.node_name), "");
}

absl::StatusOr<std::unique_ptr<Session>> Session::Join(SessionOptions options) {
  if (options.local_world_size < 1 || options.local_rank < 0 ||
      options.local_rank >= options.local_world_size) {
    return absl::InvalidArgumentError("local_rank: must be in [0, local_world_size)");
  }
  if (options.world_size < options.local_world_size || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        "rank: must be in [0, world_size), and world_size at least local_world_size");
  }
  if (options.data_tls_cert.empty() != options.data_tls_key.empty()) {
    return absl::InvalidArgumentError("data_tls_cert and data_tls_key: give both or neither");
  }
  // A malformed address is refused at once, not retried until the connect timeout.
  LOCALSGD_ASSIGN_OR_RETURN(const HostPort coordinator,
                            ParseHostPort(options.coordinator, "coordinator"));
  if (coordinator.port == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("coordinator: \"", options.coordinator, "\" names no port"));
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  if (options.node_name.empty()) options.node_name = host;
  if (!options.stop) options.stop = [] { return false; };
  LOCALSGD_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                            MakeChannelCredentials(options.tls));
  CoordinatorClient::Options client_options;
  client_options.address = options.coordinator;
  client_options.credentials = credentials;
  client_options.token = options.token;
  client_options.node_key = options.node_key;
  client_options.identity.set_node_name(options.node_name);
  client_options.identity.set_local_rank(options.local_rank);
  client_options.identity.set_local_world_size(options.local_world_size);
  client_options.hostname = host;
  client_options.connect_timeout = options.connect_timeout;
  client_options.stop = options.stop;
  LOCALSGD_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> client,
                            CoordinatorClient::Connect(client_options));
  LogInfo(absl::StrCat("joined as ", client->worker_id(), "; waiting for a run"));
  std::unique_ptr<Session> session(new Session(std::move(options), std::move(client)));
  session->credentials_ = std::move(credentials);
  absl::StatusOr<v1::RunInfo> run = session->coordinator_->WaitForRun(session->options_.stop);
  absl::StatusOr<v1::RunSpec> spec =
      run.ok() ? NormalizeRunSpec(run->spec()) : absl::StatusOr<v1::RunSpec>(run.status());
  // When rounds fall, read once here and handed down.
  absl::StatusOr<RoundSchedule> schedule =
      spec.ok()
          ? RoundSchedule::Make(spec->local_sgd_steps(), spec->overlap_steps(), spec->fragments())
          : absl::StatusOr<RoundSchedule>(spec.status());
  absl::StatusOr<RoundPace> pace = schedule.ok()
                                       ? RoundPace::Of(*spec, session->options_.round_steps)
                                       : absl::StatusOr<RoundPace>(schedule.status());
  if (!pace.ok()) {
    session
        ->Leave(session->options_.stop() ? "stopped before a run began"
                                         : absl::StrCat("failed: ", pace.status().ToString()),
                session->options_.stop() ? Departure::kDone : Departure::kFailed)
        .IgnoreError();
    return pace.status();
  }
  session->spec_ = *std::move(spec);
  session->schedule_ = *schedule;
  session->pace_ = *pace;
  session->run_id_ = run->run_id();
  LogInfo(absl::StrCat("run ", session->run_id_, " (", session->spec_.name(), ")"));
  return session;
}

bool Session::RunHalted() const {
  const v1::RunInfo now = coordinator_->run();
  return now.run_id() == run_id_ &&
         (now.state() == v1::RUN_STATE_STOPPED || now.state() == v1::RUN_STATE_FAILED);
}

bool Session::RunEnded() const {
  const v1::RunInfo now = coordinator_->run();
  return now.run_id() == run_id_ && (RunHalted() || now.state() == v1::RUN_STATE_COMPLETED);
}

std::string Session::NodeFolder() const {
  return absl::StrCat(options_.rendezvous_dir, "/", NodeFolderName(run_id_, options_.node_name));
}

absl::Status Session::FormNodeGroup() {
  // The node's ranks average with NCCL on GPUs and Gloo on CPUs, meeting in a node-local
  // folder named after the run and the node; they re-form there when one of them dies.
  const absl::Duration timeout = absl::Seconds(spec_.round_deadline_seconds() * 2 + 60);
  const c10::Device device = options_.device;
  NodeGroup::Factory factory = [device, timeout](const std::string& store, int rank, int size,
                                                 std::function<bool()> peers_alive) {
    return device.is_cuda() ? MakeNcclAverager(store, rank, size, device.index(), timeout,
                                               std::move(peers_alive))
                            : MakeGlooAverager(store, rank, size, timeout);
  };
  // This node's folders of earlier runs that no rank uses any more: their last ranks were
  // killed, so none removed them on leaving.
  NodeGroup::RemoveUnusedFolders(options_.rendezvous_dir, "localsgd-",
                                 absl::StrCat("-", options_.node_name),
                                 NodeFolderName(run_id_, options_.node_name));
  absl::StatusOr<std::unique_ptr<NodeGroup>> group =
      NodeGroup::Form(NodeFolder(), options_.local_rank, options_.local_world_size, timeout,
                      factory, [this] { return options_.stop() || RunEnded(); });
  if (!group.ok()) {
    coordinator_->Flush().IgnoreError();  // the run's latest state, for the caller's RunEnded
    if (options_.stop() || RunEnded()) {
      return absl::CancelledError(
          absl::StrCat("stopped forming the node group: ", group.status().message()));
    }
    return group.status();
  }
  group_ = std::move(*group);
  return absl::OkStatus();
}

absl::StatusOr<NodeLeader*> Session::TakeLead(const std::string& replaces) {
  const bool sharded_exchange = spec_.exchange() == v1::EXCHANGE_SHARDED;
  const bool tls = !options_.tls.ca_file.empty();
  if (sharded_exchange && !options_.data_address.empty() && data_plane_ == nullptr) {
    if (tls && options_.data_tls_cert.empty()) {
      LogWarning(
          "no sharded data plane: under TLS a node leader needs a data-plane certificate "
          "(--data_tls_cert, --data_tls_key); this node takes part in rounds but owns no range");
    } else {
      DataPlaneServer::Options data_options;
      data_options.address = options_.data_address;
      data_options.token = options_.token;
      data_options.tls.cert_file = options_.data_tls_cert;
      data_options.tls.key_file = options_.data_tls_key;
      data_options.held = held_.get();
      data_options.identity = [coordinator = coordinator_.get()] {
        return StreamTagCheck::Identity{coordinator->worker_id(), coordinator->member_credential()};
      };
      // With the coordinator's rules: the bearer token, and mutual TLS when this worker has
      // a client certificate.
      if (tls && !options_.tls.cert_file.empty()) {
        data_options.tls.client_ca_file = options_.tls.ca_file;
      }
      LOCALSGD_ASSIGN_OR_RETURN(data_plane_, DataPlaneServer::Start(data_options));
      LogInfo(absl::StrCat("data plane listening on ", data_plane_->address()));
    }
  }
  // A claim that does not get through is sent again with the heartbeats.
  if (absl::Status s = coordinator_->ClaimNodeLead(
          replaces, data_plane_ != nullptr ? data_plane_->address() : "");
      !s.ok()) {
    LogWarning(
        absl::StrCat("claiming the node's lead: ", s.ToString(), " (retried with the heartbeats)"));
  }
  if (exchange_ == nullptr && sharded_exchange) {
    ShardedExchange::Options sharded;
    sharded.coordinator = coordinator_->channel();
    sharded.token = options_.token;
    sharded.peer_credentials = credentials_;
    sharded.owner = data_plane_ != nullptr ? data_plane_->owner() : nullptr;
    sharded.inbox = data_plane_ != nullptr ? data_plane_->inbox() : nullptr;
    const v1::OuterOptimizerSpec& outer = spec_.outer_optimizer();
    sharded.outer = OuterOptimizer{outer.lr(), outer.momentum(), outer.nesterov()};
    sharded.max_norm_ratio = spec_.max_delta_norm_ratio();
    sharded.trim_fraction = spec_.trimmed_mean_fraction();
    exchange_ = std::make_unique<ShardedExchange>(std::move(sharded));
  } else if (exchange_ == nullptr) {
    exchange_ = std::make_unique<StarExchange>(coordinator_->channel(), options_.token);
  }
  if (checkpointer_ == nullptr && !options_.checkpoint_dir.empty()) {
    // A folder per node, so that the nodes may share one path.
    if (options_.node_name == "." || options_.node_name == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--checkpoint_dir: node name \"", options_.node_name, "\" cannot name its folder"));
    }
    const std::string folder = absl::StrCat(options_.checkpoint_dir, "/", options_.node_name);
    if (absl::Status made = MakeDirectories(folder); !made.ok()) {
      return absl::Status(made.code(), absl::StrCat("--checkpoint_dir: ", made.message()));
    }
    Checkpointer::Options checkpoints;
    checkpoints.path = absl::StrCat(folder, "/checkpoint.bin");
    checkpoints.every_rounds = spec_.checkpoint_every_rounds();
    checkpoints.share = spec_.checkpoint_share();
    checkpoints.chunk_values =
        ChunkLayout::ForBytes(NumValues(tensors_), spec_.chunk_bytes()).chunk_values;
    checkpoints.on_written = [client = coordinator_.get(),
                              path = checkpoints.path](const Checkpointer::Written& written) {
      v1::CheckpointInfo info;
      info.set_run_id(written.run_id);
      info.set_round(written.round);
      info.set_global_step(written.global_step);
      info.set_path(path);
      client->ReportCheckpoint(info);
    };
    checkpointer_ = std::make_unique<Checkpointer>(held_.get(), std::move(checkpoints));
    held_->set_on_change([checkpointer = checkpointer_.get()](const std::string& run_id,
                                                              int64_t round, int64_t step) {
      checkpointer->Offer(run_id, round, step);
    });
  }
  const int ranks = static_cast<int>(group_->members().size());
  SyncMember member{
      run_id_,       coordinator_->worker_id(),
      spec_.codec(), static_cast<double>(ranks),
      ranks,         [client = coordinator_.get()] { return client->member_credential(); }};
  leader_ = std::make_unique<NodeLeader>(
      models_.get(), exchange_.get(), member,
      ChunkLayout::ForBytes(NumValues(tensors_), spec_.chunk_bytes()),
      // Sharded rounds gather, then exchange, each within the deadline.
      absl::Seconds(2 * spec_.round_deadline_seconds() + 30), fragments_, held_.get(),
      fetcher_.get());
  return leader_.get();
}

absl::StatusOr<int64_t> Session::Start(std::vector<at::Tensor> tensors) {
  if (group_ == nullptr) return absl::FailedPreconditionError("Start before FormNodeGroup");
  if (tensors.empty()) return absl::InvalidArgumentError("tensors: none to average");
  tensors_ = std::move(tensors);
  absl::StatusOr<FragmentPlan> fragments = FragmentPlan::Make(
      ChunkLayout::ForBytes(NumValues(tensors_), spec_.chunk_bytes()), schedule_.fragments());
  if (!fragments.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the run's spec does not fit this model: ", fragments.status().message()));
  }
  fragments_ = *std::move(fragments);
  models_ = std::make_unique<ModelClient>(coordinator_->channel(), options_.token);
  held_ = std::make_unique<HeldModel>();
  fetcher_ = std::make_unique<ModelFetcher>(ModelFetcher::Options{
      models_.get(), options_.token, credentials_, coordinator_->worker_id()});
  NodeLeader* first_leader = nullptr;
  if (spec_.enabled() && group_->members().front() == options_.local_rank) {
    LOCALSGD_ASSIGN_OR_RETURN(first_leader, TakeLead(""));
    if (checkpointer_ != nullptr) ResumeFromCheckpoint(first_leader);
  }
  HierarchicalAverager::TakeLead take_over;
  if (spec_.enabled()) {
    take_over = [this](int dead_rank) {
      return TakeLead(absl::StrCat(options_.node_name, "/", dead_rank));
    };
  }
  hierarchical_ =
      std::make_unique<HierarchicalAverager>(group_.get(), first_leader, take_over, fragments_);
  if (!spec_.enabled()) return first_step_ = 0;
  absl::StatusOr<int64_t> resume_at = hierarchical_->Start(tensors_);
  if (!resume_at.ok()) {
    // Whether the run ended decides between leaving quietly and failing, so ask the
    // coordinator now: retried for up to 30 s while it is unreachable (as it may have been for
    // the leader too).
    RetryPolicy policy;
    policy.budget = absl::Seconds(30);
    policy.stop = options_.stop;
    Retry(policy, [this] { return coordinator_->Flush(); }).IgnoreError();
    if (options_.stop() || RunEnded()) {  // the run stopped before this worker began
      return absl::CancelledError(absl::StrCat("initial model: ", resume_at.status().message()));
    }
    return absl::Status(resume_at.status().code(),
                        absl::StrCat("initial model: ", resume_at.status().message()));
  }
  // A run in progress (this worker restarted, or joined late): go on from its global step, on
  // a sync boundary: every local_sgd_steps / fragments steps, so that with fragments the next
  // round is the next fragment's, not a second round of the one the run has just synced.
  const int64_t every = schedule_.local_sgd_steps() / schedule_.fragments();
  first_step_ = *resume_at / every * every;
  if (first_step_ > 0) {
    LogInfo(absl::StrCat("the run is at global step ", *resume_at,
                         "; resuming from the global model at step ", first_step_));
  }
  return first_step_;
}

void Session::ResumeFromCheckpoint(NodeLeader* leader) {
  // The newest checkpoint of this run among the nodes' folders (a shared path holds every
  // node's; a node-local one this node's), this node's first among equals.
  std::vector<std::pair<int64_t, std::string>> candidates;  // (-global step, path)
  const std::string own = checkpointer_->path();
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(options_.checkpoint_dir, error)) {
    const std::string path = (entry.path() / "checkpoint.bin").string();
    absl::StatusOr<std::optional<ModelStore::Label>> label = ModelStore::At(path).Peek();
    if (!label.ok() || !label->has_value() || (*label)->run_id != run_id_) continue;
    candidates.emplace_back(-(*label)->global_step, path == own ? "" : path);
  }
  std::sort(candidates.begin(), candidates.end());
  for (const auto& [minus_step, candidate] : candidates) {
    const std::string& path = candidate.empty() ? own : candidate;
    absl::StatusOr<std::optional<ModelCheckpoint>> saved = ModelStore::At(path).Load();
    if (!saved.ok() || !saved->has_value()) {
      LogWarning(absl::StrCat("not resuming from ", path, ": ",
                              saved.ok() ? "it is gone" : saved.status().ToString()));
      continue;
    }
    const int64_t round = (*saved)->round;
    if (absl::Status s = leader->ResumeFrom(**std::move(saved)); !s.ok()) {
      LogWarning(absl::StrCat("not resuming from ", path, ": ", s.message()));
      continue;
    }
    LogInfo(absl::StrCat("offering the checkpoint of round ", round, " (", path,
                         ") as the run's model"));
    return;
  }
}

absl::StatusOr<Session::CommittedModel> Session::FetchCommittedModel(
    const std::vector<at::Tensor>& tensors) {
  ModelClient client(coordinator_->channel(), options_.token);
  // From the holders (or the run's checkpoint) as an operator's fetch is: a sharded run's model
  // lives with its node leaders. Right after a run ended its last holders may be leaving while
  // their final checkpoint is still to be reported (Finish), and a running run's may come back:
  // tried for up to 20 s. Failing that, this node's own model of the run, when it holds one.
  const ModelFetcher fetcher({&client, options_.token, credentials_, /*member_id=*/""});
  RetryPolicy policy;
  policy.transient = [](const absl::Status& status) {
    return IsUnreachable(status) || absl::IsFailedPrecondition(status);
  };
  policy.backoff = policy.max_backoff = absl::Milliseconds(500);
  policy.budget = absl::Seconds(20);
  policy.stop = options_.stop;
  absl::StatusOr<ModelClient::Model> model;
  absl::StatusOr<ModelFetcher::Fetched> fetched = Retry(policy, [&] {
    return fetcher.Fetch(run_id_, absl::Seconds(10), /*include_momentum=*/false);
  });
  if (fetched.ok()) {
    model = std::move(fetched->model);
  } else {
    model = fetched.status();
  }
  if (!model.ok() && held_ != nullptr && held_->run_id() == run_id_ &&
      static_cast<int64_t>(held_->values().size()) == NumValues(tensors)) {
    LogWarning(absl::StrCat("the run's model: ", model.status().message(),
                            "; this node's own (round ", held_->round(), ") instead"));
    model = ModelClient::Model{run_id_, held_->round(), held_->global_step(), held_->values(), {}};
  }
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("the run's model: ", model.status().message()));
  }
  if (static_cast<int64_t>(model->values.size()) != NumValues(tensors)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the run's model: ", model->values.size(), " values, the model has ", NumValues(tensors)));
  }
  Unflatten(torch::from_blob(model->values.data(), {static_cast<int64_t>(model->values.size())},
                             torch::kFloat32),
            tensors, WholeModel(tensors));
  return CommittedModel{model->round, model->global_step};
}

int64_t Session::round() const { return leader_ != nullptr ? leader_->round() : 0; }

int64_t Session::global_step() const { return leader_ != nullptr ? leader_->global_step() : 0; }

absl::Status Session::Average(const std::vector<at::Tensor>& tensors, int fragment, int64_t* step) {
  if (hierarchical_ == nullptr) return absl::FailedPreconditionError("Average before Start");
  return hierarchical_->Average(tensors, fragment, step);
}

absl::Status Session::Launch(const std::vector<at::Tensor>& tensors, int fragment, int64_t* step) {
  if (hierarchical_ == nullptr) return absl::FailedPreconditionError("Launch before Start");
  return hierarchical_->Launch(tensors, fragment, step);
}

void Session::SetTrainedSteps(int64_t steps) {
  if (hierarchical_ != nullptr) hierarchical_->SetTrainedSteps(steps);
}

absl::Status Session::Merge(const std::vector<at::Tensor>& tensors, int64_t* step) {
  if (hierarchical_ == nullptr) return absl::FailedPreconditionError("Merge before Start");
  return hierarchical_->Merge(tensors, step);
}

absl::Status Session::Health() const {
  return hierarchical_ != nullptr ? hierarchical_->Health() : absl::OkStatus();
}

void Session::FlushCheckpoint(absl::Duration wait) {
  if (checkpointer_ == nullptr) return;
  if (absl::Status flushed = checkpointer_->Flush(wait); !flushed.ok()) {
    LogWarning(absl::StrCat("the last checkpoint: ", flushed.ToString()));
  } else if (auto written = checkpointer_->last_written(); written.has_value()) {
    LogInfo(absl::StrCat("checkpoint of round ", written->round, " (global step ",
                         written->global_step, ") in ", checkpointer_->path()));
  }
}

absl::Status Session::Leave(const std::string& reason, Departure departure) {
  if (checkpointer_ != nullptr) {
    FlushCheckpoint(absl::Seconds(60));
    coordinator_->Flush().IgnoreError();  // the heartbeat that reports it
  }
  return coordinator_->Leave(reason, departure);
}

absl::Status Session::Finish(int64_t steps, double loss, double samples_per_second,
                             double test_accuracy, const std::string& reason, Ending ending,
                             absl::Duration wait) {
  const bool finished = ending == Ending::kFinished;
  FlushCheckpoint(wait);  // before the final report, which carries it
  coordinator_->Report(steps, loss, samples_per_second, finished, test_accuracy);
  coordinator_->Flush().IgnoreError();  // the final report, at once
  // Stay a member until the run ends, so that the run can see every worker finished.
  if (finished) {
    RetryPolicy policy;
    policy.backoff = policy.max_backoff = absl::Milliseconds(100);
    policy.budget = wait;
    policy.stop = options_.stop;
    Retry(policy, [this] {
      return coordinator_->run().state() == v1::RUN_STATE_RUNNING
                 ? absl::UnavailableError("the run is still running")
                 : absl::OkStatus();
    }).IgnoreError();
    // A sharded run's final model lives with its node leaders (RunInfo.model): one holding it
    // serves it to the nodes the last round left out until they have it or left (at most
    // kServeFinalModel).
    const v1::RunInfo run = coordinator_->run();
    if (leads_node() && run.run_id() == run_id_ && run.has_model() && round() == run.round() &&
        MembersBehind(run, worker_id())) {
      LogInfo("serving the run's final model to the nodes its last round left out");
      policy.budget = std::min(wait, kServeFinalModel);
      absl::Status served = Retry(policy, [this] {
        return MembersBehind(coordinator_->run(), worker_id())
                   ? absl::UnavailableError("a member is behind the run's final model")
                   : absl::OkStatus();
      });
      if (!served.ok()) LogWarning(absl::StrCat("leaving with members behind: ", served.message()));
    }
  }
  return coordinator_->Leave(
      reason, ending == Ending::kPreempted ? Departure::kPreempted : Departure::kDone);
}

}  // namespace localsgd
