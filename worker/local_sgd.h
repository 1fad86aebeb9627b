#ifndef LOCALSGD_WORKER_LOCAL_SGD_H_
#define LOCALSGD_WORKER_LOCAL_SGD_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/round_schedule.h"
#include "worker/parameter_averager.h"
#include "worker/round_pace.h"

namespace localsgd {

// The two-line API (README.md, "Your own training loop"), the C++ counterpart of Accelerate's
// LocalSGD:
//
//   localsgd::LocalSGD local_sgd(&averager, model->parameters(), RoundSchedule::Make(8).value());
//   for (...) { ...; optimizer.step(); optimizer.zero_grad(); local_sgd.Step(); }
//
// Step() counts optimizer steps (with gradient accumulation, call it after optimizer.step(),
// not after every micro-batch) and averages the model at steps K, 2K, 3K, ... With
// enabled = false it never communicates. Finish() (or the destructor) runs one last sync when
// steps were taken since the last one, so every copy ends equal.
//
// With overlap_steps = tau > 0 (docs/design.md, "Overlapped rounds") the round of step s runs
// beside training: Step() launches it at s (ParameterAverager::Launch) and merges it at s + tau
// (ParameterAverager::Merge); Finish() merges a round still in flight before the last sync.
// With fragments = P > 1 (docs/design.md, "Streaming fragments") a round every
// local_sgd_steps / P steps carries one fragment (RoundSchedule::FragmentAt), and Finish() syncs
// every fragment not synced at the last step. In a paced run (RoundPace; docs/design.md, "Paced
// rounds") a copy trains until its window ends (RoundPace), then moves steps() to the next
// round's step and syncs there, its delta weighed by the steps it trained.
// Thread-compatible.
class LocalSGD {
 public:
  // `tensors` are the model's parameters followed by the buffers to average (see
  // ModelTensors); they are updated in place. The averager must outlive this object.
  // `schedule`: when rounds fall (local_sgd_steps, overlap_steps, fragments). `first_step`:
  // optimizer steps already taken (a worker resuming a run in progress; a multiple of
  // local_sgd_steps keeps the syncs on the run's boundaries). `pace`: a paced run's.
  LocalSGD(ParameterAverager* averager, std::vector<at::Tensor> tensors, RoundSchedule schedule,
           bool enabled = true, int64_t first_step = 0, RoundPace pace = RoundPace());
  ~LocalSGD();
  LocalSGD(const LocalSGD&) = delete;
  LocalSGD& operator=(const LocalSGD&) = delete;

  // Counts one optimizer step; at every local_sgd_steps-th it averages (or launches the
  // overlapped round, and merges it overlap_steps later). An error from the
  // averager is returned (training may go on: the model then keeps its local values, unless
  // the averager's Health() is an error). After a sync steps() may have moved (the averager
  // set another step: see ParameterAverager::Average); a caller's own step count follows it.
  absl::Status Step();

  // The syncs at this step once more, after one failed (the run's last round, say, while the
  // coordinator was unreachable): every fragment whose last sync failed or was not at this
  // step, this step's own first (RoundSchedule::FragmentAt: the round missed at a merge), then
  // the next ones; a sync refused because the open round carries another fragment syncs that
  // one at once (it joins the others' round). It stops at a sync that finds the run ended.
  // steps() may move, as after any sync.
  absl::Status Resync();
  // Merges the overlapped round in flight now, if any (the run's last step: its outcome decides
  // whether to try the last round again). OK when none is in flight.
  absl::Status MergeNow();
  bool round_in_flight() const { return launched_at_ >= 0; }

  // The last sync of every fragment that took steps since its previous one, after merging a
  // round in flight, in Resync's order; it stops at a sync that finds the run ended.
  // Idempotent.
  absl::Status Finish();

  // Ends without the last sync (e.g. on SIGTERM, when the other workers are not at the same
  // step and a sync would only wait for them); Finish and the destructor then do nothing.
  void Abandon() { finished_ = true; }

  // The run's last step, when the caller knows it (0: unknown): steps() never passes it. A
  // round's outcome that would (a merge after the run's step reached it, a move into the open
  // round's phase) holds the copy there, so that it takes part in the run's last round rather
  // than training past it.
  void set_last_step(int64_t last_step) { last_step_ = last_step; }

  int64_t steps() const { return steps_; }
  // The steps the last Step() moved steps() past to the next round's step (paced runs).
  int64_t paced_skip() const { return paced_skip_; }
  // Optimizer steps since the last round this copy took (one that committed with it, or one
  // that found the run ahead: it took the run's model); since first_step before any.
  int64_t unsynced_steps() const { return steps_ - took_at_; }
  int64_t syncs() const { return syncs_; }
  // Rounds whose outcome this copy has taken (a sync, a merge, or a launch that failed).
  int64_t rounds_completed() const { return rounds_completed_; }
  const RoundSchedule& schedule() const { return schedule_; }

 private:
  absl::Status Sync(int fragment);
  absl::Status Launch(int fragment);
  // After a round of the step `boundary` whose fragment was not the open round's (the
  // status's RoundFragment): moves steps() into the round's phase. Returns `status`.
  absl::Status IntoPhase(absl::Status status, int64_t boundary);
  // After the averager or a move set steps(): no further than the last step.
  void HoldAtLastStep();
  // After a round's outcome `status`: whether the copy took the round (see unsynced_steps).
  void Took(const absl::Status& status);
  // Paced runs: the round of `fragment` is about to go; its delta covers trained_[fragment].
  void BeforeRound(int fragment);
  // After that round's outcome `status` (of `fragment`, whose delta covered `steps`): the
  // steps its next delta covers.
  void AfterRound(int fragment, int64_t steps, const absl::Status& status);
  // Paced runs: a window of training begins now; the time trained in it so far (waits in Merge
  // or Average left out).
  void StartWindow();
  absl::Duration WindowTrained() const;

  ParameterAverager* const averager_;
  const std::vector<at::Tensor> tensors_;
  const RoundSchedule schedule_;
  const bool enabled_;
  int64_t steps_ = 0;
  int64_t last_step_ = 0;
  int64_t took_at_ = 0;             // the step of the last round taken
  int64_t launched_at_ = -1;        // the step of the overlapped round in flight, or -1
  int launched_fragment_ = 0;       // and its fragment
  std::vector<int64_t> synced_at_;  // by fragment: the step of its last sync
  std::vector<bool> failed_;        // by fragment: its last sync failed
  int64_t syncs_ = 0;
  int64_t rounds_completed_ = 0;
  bool finished_ = false;
  // Paced runs.
  RoundPace pace_;
  int64_t paced_skip_ = 0;
  int64_t window_steps_ = 0;                        // optimizer steps since the last round
  absl::Time window_start_ = absl::InfinitePast();  // when the window began
  absl::Duration waited_;                           // and the time since in Merge or Average
  std::vector<int64_t> trained_;  // by fragment: steps since its delta was last taken
  int64_t launched_steps_ = 0;    // what the round in flight's delta covers
};

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_LOCAL_SGD_H_
