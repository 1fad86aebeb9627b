#ifndef LOCALSGD_WORKER_SESSION_H_
#define LOCALSGD_WORKER_SESSION_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/round_schedule.h"
#include "common/tls.h"
#include "exchange/fragment_plan.h"
#include "proto/localsgd/v1/run_spec.pb.h"
#include "worker/coordinator_client.h"
#include "worker/parameter_averager.h"
#include "worker/round_pace.h"

namespace localsgd {

// The pieces a Session owns; users of this header need not see them.
class Checkpointer;
class DataPlaneServer;
class Exchange;
class HeldModel;
class HierarchicalAverager;
class ModelClient;
class ModelFetcher;
class NodeGroup;
class NodeLeader;

// How one rank (one process) takes part in a localsgd run.
struct SessionOptions {
  // The coordinator's gRPC HOST:PORT, its bearer token, and TLS (a CA: TLS; with a client
  // certificate: mutual TLS; empty: plaintext).
  std::string coordinator = "127.0.0.1:50051";
  std::string token;
  ClientTls tls;
  // This node's key, for a coordinator that binds node names to keys (common/node_key.h).
  std::string node_key;
  // This node's name (empty: the host name) and this process's rank among the node's ranks.
  // Rank 0 leads the node; when it dies the lowest live rank takes over.
  std::string node_name;
  int local_rank = 0;
  int local_world_size = 1;
  // This process among every rank of the job (e.g. for sharding data): rank in
  // [0, world_size). SessionOptionsFromEnvironment (worker/environment.h) reads all four from
  // torchrun's or srun's variables.
  int rank = 0;
  int world_size = 1;
  // Where the model lives: CPU ranks average within the node with Gloo, CUDA ranks with NCCL.
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  // A node-local folder where the node's ranks meet.
  std::string rendezvous_dir = "/tmp";
  // The node leader's sharded data plane: where it listens (port 0: a free one; host
  // 0.0.0.0: every interface, advertised as the address the coordinator sees; empty: none),
  // and its certificate under TLS (without one under TLS the node serves no data plane).
  std::string data_address = "0.0.0.0:0";
  std::string data_tls_cert;
  std::string data_tls_key;
  // Where the node's checkpoints go (docs/design.md, "Checkpoints"): its leader writes the
  // model it holds to <checkpoint_dir>/<node_name>/checkpoint.bin at the run spec's cadence and
  // before it leaves, and at its start offers the newest checkpoint of the run in any node's
  // folder there (empty: no checkpoints). A folder of the node's or a path the nodes share;
  // created if missing.
  std::string checkpoint_dir;
  // How long to keep retrying an unreachable coordinator.
  absl::Duration connect_timeout = absl::Minutes(5);
  // Paced runs (RunSpec.round_seconds): the optimizer steps this node trains between two of its
  // rounds, fixed (RoundPace); 0: as many as its speed allows. Every rank of a node gives the
  // same.
  int64_t round_steps = 0;
  // Waiting (to connect, for a run, for the node's ranks) ends once this returns true, e.g. on
  // a signal: CANCELLED.
  std::function<bool()> stop = [] { return false; };
};

// One rank's part in a run: the coordinator connection, the run's spec, the node's group of
// ranks, and (node leaders) the data plane and the sync rounds. As a ParameterAverager it
// averages the given tensors across every rank of every node: give it to LocalSGD. Made by
// Replica::Connect (worker/replica.h) in one call, or step by step (Join, FormNodeGroup, Start) by
// a program that needs the spec before it has a model (worker_app.cc). Thread-compatible.
class Session : public ParameterAverager {
 public:
  // Joins the coordinator (retrying while it is unreachable) and waits for a running run.
  // CANCELLED when options.stop() became true.
  static absl::StatusOr<std::unique_ptr<Session>> Join(SessionOptions options);
  ~Session() override;

  // The run (its spec normalized: defaults filled in).
  const std::string& run_id() const { return run_id_; }
  const v1::RunSpec& spec() const { return spec_; }
  // When the run's rounds fall (its spec's, checked once at Join).
  const RoundSchedule& schedule() const { return schedule_; }
  // How many steps this node trains between its rounds (paced runs; checked at Join).
  const RoundPace& pace() const { return pace_; }
  std::string worker_id() const { return coordinator_->worker_id(); }
  const std::string& node_name() const { return options_.node_name; }
  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  int local_rank() const { return options_.local_rank; }
  int local_world_size() const { return options_.local_world_size; }
  CoordinatorClient& coordinator() { return *coordinator_; }

  // Forms the node's group with its other ranks (they call it too). CANCELLED when stop()
  // became true or the run ended meanwhile (see RunEnded).
  absl::Status FormNodeGroup();

  // Takes part in the run with `tensors` (the model's parameters, then any buffers to
  // average; updated in place): the node leader claims its node at the coordinator and serves
  // its data plane; every rank then takes the run's initial model, or the global model of a
  // run in progress. Returns the optimizer step to start from: 0, or for a run in progress its
  // global step rounded down to a sync boundary (also first_step()).
  absl::StatusOr<int64_t> Start(std::vector<at::Tensor> tensors);
  int64_t first_step() const { return first_step_; }

  // ParameterAverager (after Start).
  absl::Status Average(const std::vector<at::Tensor>& tensors, int fragment,
                       int64_t* step) override;
  absl::Status Launch(const std::vector<at::Tensor>& tensors, int fragment, int64_t* step) override;
  absl::Status Merge(const std::vector<at::Tensor>& tensors, int64_t* step) override;
  absl::Status Health() const override;
  void SetTrainedSteps(int64_t steps) override;

  // The run was stopped or failed (training should stop); or it ended in any way, completed
  // too. As of the latest heartbeat.
  bool RunHalted() const;
  bool RunEnded() const;

  // Copies the last committed global model of this session's run (its final model once the
  // run ended) into `tensors` (the same tensors Start takes): for a rank that must save the
  // run's model but holds another (it joined too late to train, or the run was stopped before
  // its last sync and the rank holds its own weights), from its holders or its checkpoint
  // (ModelFetcher), tried for up to 20 s; failing that, the model this node holds of the run
  // (its last agreed round). Returns the model's round and global step.
  struct CommittedModel {
    int64_t round = 0;
    int64_t global_step = 0;
  };
  absl::StatusOr<CommittedModel> FetchCommittedModel(const std::vector<at::Tensor>& tensors);

  // This rank leads its node now, and the round and global step its node last agreed on (not
  // while an overlapped round is in flight).
  bool leads_node() const { return leader_ != nullptr; }
  int64_t round() const;
  int64_t global_step() const;

  // How a rank's training ended.
  enum class Ending {
    kFinished,   // its steps are done
    kStopped,    // the run was stopped or ended first
    kPreempted,  // stopped from outside (a signal): it is expected back
  };
  // The end of a rank's training: reports the final progress (finished only when it is),
  // stays a member until the run ends (at most `wait`, so that the coordinator sees every
  // worker finish) when finished, then, a node leader holding a sharded run's final model,
  // while other members are behind it (MembersBehind; at most 30 s), and leaves with
  // `reason`.
  absl::Status Finish(int64_t steps, double loss, double samples_per_second, double test_accuracy,
                      const std::string& reason, Ending ending = Ending::kFinished,
                      absl::Duration wait = absl::Seconds(60));

  using Departure = CoordinatorClient::Departure;
  // Leaves the coordinator (idempotent), e.g. with "failed: <error>" as kFailed; a node leader
  // first writes its checkpoint of the round it holds (as Finish does).
  absl::Status Leave(const std::string& reason, Departure departure = Departure::kDone);

 private:
  Session(SessionOptions options, std::unique_ptr<CoordinatorClient> coordinator);
  // Where the node's ranks meet: a folder per run and node in options.rendezvous_dir.
  std::string NodeFolder() const;
  // Has `leader` offer the newest checkpoint of this run in options_.checkpoint_dir (any node's
  // folder), if there is one, at its Start.
  void ResumeFromCheckpoint(NodeLeader* leader);
  // A node leader with a checkpoint folder: writes the round it holds unless written already,
  // waiting at most `wait` (logged, never fatal).
  void FlushCheckpoint(absl::Duration wait);
  // Leads the node from now on, in place of `replaces` (a dead leader's worker id) or "".
  absl::StatusOr<NodeLeader*> TakeLead(const std::string& replaces);

  SessionOptions options_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::unique_ptr<CoordinatorClient> coordinator_;
  std::string run_id_;
  v1::RunSpec spec_;
  std::unique_ptr<NodeGroup> group_;
  std::vector<at::Tensor> tensors_;
  RoundSchedule schedule_;
  RoundPace pace_;
  FragmentPlan fragments_;  // the run's, over tensors_
  std::unique_ptr<ModelClient> models_;
  std::unique_ptr<ModelFetcher> fetcher_;
  // The node leader's model, which the data plane serves: it outlives both.
  std::unique_ptr<HeldModel> held_;
  // Writes held_ to options_.checkpoint_dir (the node's leaders); before the leader, which
  // commits into held_, so that it outlives it.
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<DataPlaneServer> data_plane_;
  std::unique_ptr<Exchange> exchange_;  // made by the first TakeLead
  std::unique_ptr<NodeLeader> leader_;
  std::unique_ptr<HierarchicalAverager> hierarchical_;
  int64_t first_step_ = 0;
};

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_SESSION_H_
