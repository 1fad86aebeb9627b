#ifndef LOCALSGD_EXCHANGE_CHECKPOINTER_H_
#define LOCALSGD_EXCHANGE_CHECKPOINTER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "exchange/checkpoint_cadence.h"
#include "exchange/held_model.h"

namespace localsgd {

// Writes the model a node leader holds to the node's checkpoint file, off the round's path
// (docs/design.md, "Checkpoints"): on a thread of its own, at the committed rounds its
// CheckpointCadence picks; a round offered while another is written waits, and a newer one
// takes its place. The model and momentum are read through a HeldModel lease, a chunk at a time,
// into the file (no copy of the model, unless a commit lands while they are read), and the file
// (the format of common/model_store.h) replaces the last one only once it is complete and
// fsynced. A failed write is logged and kept (last_error) and a later round tried; the rounds
// never wait for it. Thread-safe.
class Checkpointer {
 public:
  // A checkpoint written.
  struct Written {
    std::string run_id;
    int64_t round = 0;
    int64_t global_step = 0;
    absl::Duration took;
  };
  struct Options {
    // The checkpoint file (e.g. <checkpoint folder>/checkpoint.bin); its folder must exist.
    std::string path;
    // RunSpec.checkpoint_every_rounds and checkpoint_share (CheckpointCadence).
    int64_t every_rounds = 1;
    double share = 0.05;
    // The values read at a time (the run's chunk size).
    int64_t chunk_values = 1 << 20;
    // Called on the checkpointer's thread after each checkpoint written (e.g. to report it).
    std::function<void(const Written&)> on_written;
  };
  // `held` outlives the checkpointer.
  Checkpointer(HeldModel* held, Options options);
  // Lets a write under way finish, then stops.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // The held model is now round `round` of run `run_id` at `global_step` (a commit, the
  // initial model, an adoption). The first round offered is where the cadence's count begins.
  void Offer(const std::string& run_id, int64_t round, int64_t global_step);
  // Writes the last round offered now unless it is written already, whatever the cadence, and
  // waits for it (a run's end): its outcome, DEADLINE_EXCEEDED after `timeout`.
  absl::Status Flush(absl::Duration timeout);

  // The last checkpoint written.
  std::optional<Written> last_written() const;
  // The last write's failure (OK once a later one succeeded).
  absl::Status last_error() const;
  const std::string& path() const { return options_.path; }

 private:
  struct Offered {
    std::string run_id;
    int64_t round = 0;
    int64_t global_step = 0;
  };
  void Run();
  // Writes `round` from the held model (without the lock). FAILED_PRECONDITION when the held
  // model moved on before its lease was opened.
  absl::Status Write(const Offered& round);
  // The last round offered is written (or none was offered).
  bool Current() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  HeldModel* const held_;
  const Options options_;
  mutable Mutex mu_;
  CheckpointCadence cadence_ ABSL_GUARDED_BY(mu_);
  std::optional<Offered> offered_ ABSL_GUARDED_BY(mu_);  // the newest round offered
  bool pending_ ABSL_GUARDED_BY(mu_) = false;            // offered_ is not written yet
  bool forced_ ABSL_GUARDED_BY(mu_) = false;             // a Flush waits
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t writes_ ABSL_GUARDED_BY(mu_) = 0;  // writes ended, either way
  std::optional<Written> written_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_CHECKPOINTER_H_
