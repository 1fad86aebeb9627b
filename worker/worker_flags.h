#ifndef LOCALSGD_WORKER_WORKER_FLAGS_H_
#define LOCALSGD_WORKER_WORKER_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "worker/session.h"

namespace localsgd {

// The worker program's command line (its flags are defined in worker_flags.cc), resolved.
struct WorkerFlags {
  SessionOptions session;  // all but stop
  // The node holding global rank 0 (ranks are numbered node by node): it saves the model.
  bool first_node = false;
  std::string save_model;  // where (empty: nowhere)
  int log_every = 10;      // a progress line every this many steps
};

// Parses the command line, sets LibTorch's threads (--threads) and returns what the flags say.
// INVALID_ARGUMENT naming the flag for a usage error.
absl::StatusOr<WorkerFlags> ParseWorkerFlags(int argc, char** argv);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_WORKER_FLAGS_H_
