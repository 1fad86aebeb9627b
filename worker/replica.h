#ifndef LOCALSGD_WORKER_REPLICA_H_
#define LOCALSGD_WORKER_REPLICA_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/localsgd/v1/run_spec.pb.h"
#include "worker/parameter_averager.h"
#include "worker/session.h"
#include "worker/training_steps.h"

namespace localsgd {

// Wraps the averager a replica syncs through (a test observes each sync); `name` is
// "<node>-<local rank>". The wrapper must forward to `inner`, which outlives it; null: none.
using AveragerWrapper = std::function<std::unique_ptr<ParameterAverager>(ParameterAverager* inner,
                                                                         const std::string& name)>;

// How Replica::Connect joins a run.
struct ReplicaOptions {
  // Where to connect and this process's ranks; nullopt: SessionOptionsFromEnvironment().
  std::optional<SessionOptions> session;
  // A run to start when none is active (a quick try with no operator): global rank 0 starts
  // it, with min_workers = the world size unless it says otherwise. nullopt: wait for the
  // operator's run.
  std::optional<v1::RunSpec> start;
  // What this program expects of the run: every field set here must be the run's, or
  // Connect fails naming the field (e.g. a script written for local_sgd_steps 8).
  v1::RunSpec expect;
  // The model's float buffers (batch-norm statistics): averaged after the parameters when
  // the run's spec says average_buffers.
  std::vector<at::Tensor> buffers;
  // How a stop (session->stop() true) before training leaves: the worker's signal is a
  // preemption ("stopped by signal"), a user's interrupt is not.
  Session::Departure stopped = Session::Departure::kDone;
  std::string stopped_reason = "stopped before training";
  // Around the averager the replica syncs through (a test binary's); null: none.
  AveragerWrapper wrap;
};

// Your own training loop's part in a localsgd run, in two lines (README.md, "Your own training
// loop"; the Python package's localsgd.LocalSGD is this class):
//
//   auto local_sgd = localsgd::Replica::Connect(model->parameters()).value();
//   for (...) { ...; optimizer.step(); optimizer.zero_grad(); local_sgd->Step(); }
//
// Connect takes where to connect and this process's ranks from the environment
// (worker/environment.h: LOCALSGD_*, torchrun's or srun's variables), joins the coordinator,
// waits for the operator's run (or starts one: Options::start), forms the node's group and
// takes the run's model into `tensors`. Step() counts optimizer steps and averages the tensors
// in place every local_sgd_steps, as the run says (overlap, fragments, codec). The destructor
// finishes (Finish()) unless Leave() came first. One replica per process at a time (Connect
// refuses a second one while the first is open). Thread-safe: calls from several threads
// take turns (each Step still counts one step). The worker program (worker/worker_app.h) is a
// training loop over a Replica too: one lifecycle for both (docs/design.md, "Components").
class Replica {
 public:
  using Departure = Session::Departure;
  using Options = ReplicaOptions;

  // `tensors`: the model's parameters; updated in place and kept by reference (they must stay
  // the model's storage). On an error it has left the coordinator.
  static absl::StatusOr<std::unique_ptr<Replica>> Connect(std::vector<at::Tensor> tensors,
                                                          Options options = Options());
  // For a program that builds its model from the run's spec (the worker): `tensors_for` is
  // called once, after joining, and returns the tensors to average (parameters, then buffers
  // when the spec says average_buffers); its error leaves as failed. When the run ended before
  // this rank could begin (the others finished it while this one started), the replica is
  // returned with run_ended() true and its first Step() OUT_OF_RANGE.
  using TensorsFor = std::function<absl::StatusOr<std::vector<at::Tensor>>(const v1::RunSpec&)>;
  static absl::StatusOr<std::unique_ptr<Replica>> Connect(TensorsFor tensors_for, Options options);
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // Counts one optimizer step (with gradient accumulation: once per optimizer.step()) and
  // syncs at the run's boundaries; at the run's last step the last round is tried again while
  // it fails for a passing reason. A sync that fails for a passing reason is logged and
  // training goes on from the local model, as in the worker. Errors: OUT_OF_RANGE once the
  // run ended (stopped, failed, or completed without this rank's steps: the tensors then hold
  // the run's final model when it completed), or this rank's node group broke.
  absl::Status Step();
  // For the status page: the latest training loss, the test accuracy (< 0: none yet) and the
  // samples trained since the last report (the rate is theirs over the last second or more;
  // a report without samples leaves it as it is). A loss that is not finite is reported as it is
  // (the run fails once every worker's is). INVALID_ARGUMENT naming the argument for an
  // accuracy that is not finite or above 1 (a percentage, say) or a negative sample count;
  // nothing is reported then (the coordinator would refuse every heartbeat that carries it).
  absl::Status Report(double loss, double test_accuracy = -1, int64_t samples = 0);

  // The last sync (every fragment with steps since its previous one), the final report, at
  // most `wait` as a member until the run ends (so the coordinator sees every rank finish),
  // and leaving with "finished". Idempotent; the destructor calls it.
  absl::Status Finish(absl::Duration wait = absl::Seconds(60));
  // Leaves without the last sync (the loop raised, or was interrupted), with `reason` and how
  // (done, preempted: the final progress reported first, or failed on an error). Idempotent;
  // Finish then does nothing.
  absl::Status Leave(const std::string& reason, Departure departure = Departure::kDone);

  // After Finish, or Step's OUT_OF_RANGE: makes the tensors hold the run's last committed
  // global model (its final one once the run ended) and returns its round and global step. A
  // rank that synced the run's last round, or ended with the run, holds it; one that stopped
  // early (TrainingSteps::stopped_early) or never began fetches it
  // (Session::FetchCommittedModel). A run that does not sync (enabled: false): this rank's own.
  absl::StatusOr<Session::CommittedModel> FinalModel();

  int rank() const { return session_->rank(); }
  int world_size() const { return session_->world_size(); }
  int local_rank() const { return session_->local_rank(); }
  int local_world_size() const { return session_->local_world_size(); }
  const v1::RunSpec& spec() const { return session_->spec(); }
  const std::string& run_id() const { return session_->run_id(); }
  std::string worker_id() const { return session_->worker_id(); }
  int64_t steps() const { return training_->steps(); }
  int64_t syncs() const { return training_->syncs(); }
  double samples_per_second() const { return samples_per_second_; }
  // The run ended (as of the latest heartbeat).
  bool run_ended() const { return session_->RunEnded(); }
  // This rank took part in the run (false: it ended before this rank could begin).
  bool began() const { return began_; }
  Session& session() { return *session_; }
  // The steps, for a loop that drives them itself (the worker's Train); one caller at a time.
  TrainingSteps& training() { return *training_; }

 private:
  Replica(std::unique_ptr<Session> session, std::vector<at::Tensor> tensors,
          const AveragerWrapper& wrap, std::function<bool()> stop, bool began);
  static absl::StatusOr<std::unique_ptr<Replica>> ConnectOnce(TensorsFor tensors_for,
                                                              Options& options);

  std::unique_ptr<Session> session_;
  std::vector<at::Tensor> tensors_;
  std::unique_ptr<ParameterAverager> wrapped_;  // Options::wrap's, around session_
  std::unique_ptr<TrainingSteps> training_;
  const bool began_;  // took part in the run (false: it ended before this rank could begin)
  double loss_ = 0;
  double test_accuracy_ = 0;
  double samples_per_second_ = 0;
  int64_t window_samples_ = 0;
  absl::Time window_start_;
  Mutex mu_;           // one call at a time
  bool done_ = false;  // finished or left
};

// Fails naming the first field set in `expect` whose value `spec` does not have.
absl::Status CheckExpectedSpec(const v1::RunSpec& expect, const v1::RunSpec& spec);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_REPLICA_H_
