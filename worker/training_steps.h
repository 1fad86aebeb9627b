#ifndef LOCALSGD_WORKER_TRAINING_STEPS_H_
#define LOCALSGD_WORKER_TRAINING_STEPS_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/round_schedule.h"
#include "worker/local_sgd.h"
#include "worker/parameter_averager.h"
#include "worker/round_pace.h"
#include "worker/unsynced_bound.h"

namespace localsgd {

// One rank's optimizer steps in a run and the rounds they end: what happens after each
// optimizer step, the same for the worker program's loop (worker/trainer.h) and a user's loop
// (Replica::Step): LocalSGD's sync, the run's last round tried again (SyncLastStep), the wait
// within max_unsynced_steps (WaitWithinBound), the node's health, following the run's step, and
// the end of the run. Thread-compatible.
class TrainingSteps {
 public:
  struct Options {
    RoundSchedule schedule;
    RoundPace pace;          // a paced run's (RoundPace::Of)
    bool enabled = true;     // the run syncs (RunSpec.enabled)
    int64_t first_step = 0;  // Session::first_step
    int64_t max_unsynced_steps = 0;
    // OK while the run goes on; once it was stopped or failed, OUT_OF_RANGE saying so. Asked
    // after a step, at most every 100 ms.
    std::function<absl::Status()> halted = [] { return absl::OkStatus(); };
    // The run ended in any way (as of the latest heartbeat): the last round is not retried.
    std::function<bool()> run_ended = [] { return false; };
    // This rank is stopping (a signal, an interrupt): a wait for a round ends.
    std::function<bool()> stop = [] { return false; };
    // After each step: where this copy stands (for the coordinator).
    std::function<void(int64_t step, int64_t unsynced_steps)> on_step = [](int64_t, int64_t) {};
  };

  // As LocalSGD's: `tensors` are averaged in place through `averager` (which outlives this).
  TrainingSteps(ParameterAverager* averager, std::vector<at::Tensor> tensors, Options options);

  // The run's last step, when the caller knows it (its total; 0: unknown).
  void set_last_step(int64_t step);

  // Counts one optimizer step and syncs at the run's boundaries. A round that failed for a
  // passing reason is logged and training goes on from the local model; steps() may move to
  // the run's step. Errors: OUT_OF_RANGE once the run ended (halted(): stopped or failed; else
  // it completed without this rank's last steps, and the tensors hold its final model), or the
  // averager's Health().
  absl::Status Step();
  // The last sync of every fragment with steps since its previous one, tried again while it
  // fails for a passing reason (LastRoundRetry) unless SyncLastStep did at the run's last step;
  // none after Abandon or once the run halted. A sync that fails is logged; the error returned
  // is the averager's Health(). Idempotent.
  absl::Status Finish();
  // Ends without the last sync (a preempted or failed rank).
  void Abandon() {
    abandoned_ = true;
    local_sgd_.Abandon();
  }

  int64_t steps() const { return local_sgd_.steps(); }
  int64_t syncs() const { return local_sgd_.syncs(); }
  int64_t rounds_completed() const { return local_sgd_.rounds_completed(); }
  int64_t unsynced_steps() const { return local_sgd_.unsynced_steps(); }
  // Step returned OUT_OF_RANGE: the run ended; halted(): because it was stopped or failed (this
  // copy holds its own weights, not the run's).
  bool ended() const { return ended_; }
  bool halted() const { return halted_; }
  // Abandoned, or the run halted: this copy holds its own weights, not the run's last model.
  bool stopped_early() const { return abandoned_ || halted_; }

 private:
  ParameterAverager* const averager_;
  LocalSGD local_sgd_;
  Options options_;
  UnsyncedBound bound_;
  int64_t last_step_ = 0;
  absl::Time next_look_ = absl::InfinitePast();  // when Step next asks options_.halted
  bool ended_ = false;
  bool halted_ = false;
  bool abandoned_ = false;
};

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_TRAINING_STEPS_H_
