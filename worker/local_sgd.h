#ifndef LOCALSGD_WORKER_LOCAL_SGD_H_
#define LOCALSGD_WORKER_LOCAL_SGD_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/parameter_averager.h"

namespace localsgd {

// The two-line API (README.md, "Your own training loop"), the C++ counterpart of Accelerate's
// LocalSGD:
//
//   localsgd::LocalSGD local_sgd(&averager, model->parameters(), /*local_sgd_steps=*/8);
//   for (...) { ...; optimizer.step(); optimizer.zero_grad(); local_sgd.Step(); }
//
// Step() counts optimizer steps (with gradient accumulation, call it after optimizer.step(),
// not after every micro-batch) and averages the model at steps K, 2K, 3K, ... With
// enabled = false it never communicates. Finish() (or the destructor) runs one last sync when
// steps were taken since the last one, so every copy ends equal.
// Thread-compatible.
class LocalSGD {
 public:
  // `tensors` are the model's parameters followed by the buffers to average (see
  // ModelTensors); they are updated in place. The averager must outlive this object.
  // `first_step`: optimizer steps already taken (a worker resuming a run in progress; a
  // multiple of local_sgd_steps keeps the syncs on the run's boundaries).
  LocalSGD(ParameterAverager* averager, std::vector<at::Tensor> tensors, int local_sgd_steps,
           bool enabled = true, int64_t first_step = 0);
  ~LocalSGD();
  LocalSGD(const LocalSGD&) = delete;
  LocalSGD& operator=(const LocalSGD&) = delete;

  // Counts one optimizer step; at every local_sgd_steps-th it averages. An error from the
  // averager is returned (training may go on: the model then keeps its local values, unless
  // the averager's Health() is an error). After a sync steps() may have moved (the averager
  // set another step: see ParameterAverager::Average); a caller's own step count follows it.
  absl::Status Step();

  // The sync of the current step once more, after it failed (the run's last round, say, while
  // the coordinator was unreachable). steps() may move, as after any sync.
  absl::Status Resync() { return Sync(); }
  // The last sync, if any step was taken since the previous one. Idempotent.
  absl::Status Finish();

  // Ends without the last sync (e.g. on SIGTERM, when the other workers are not at the same
  // step and a sync would only wait for them); Finish and the destructor then do nothing.
  void Abandon() { finished_ = true; }

  int64_t steps() const { return steps_; }
  int64_t syncs() const { return syncs_; }
  int local_sgd_steps() const { return local_sgd_steps_; }

 private:
  absl::Status Sync();

  ParameterAverager* const averager_;
  const std::vector<at::Tensor> tensors_;
  const int local_sgd_steps_;
  const bool enabled_;
  int64_t steps_ = 0;
  int64_t synced_at_ = 0;
  int64_t syncs_ = 0;
  bool finished_ = false;
};

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_LOCAL_SGD_H_
