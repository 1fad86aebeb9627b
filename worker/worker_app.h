#ifndef LOCALSGD_WORKER_WORKER_APP_H_
#define LOCALSGD_WORKER_WORKER_APP_H_

#include <functional>
#include <memory>
#include <string>

#include "worker/parameter_averager.h"

namespace localsgd {

// Wraps the worker's averager (the node's hierarchical averager); `name` is
// "<node>-<local rank>". The wrapper must forward to `inner`, which outlives it; null: none.
using AveragerWrapper = std::function<std::unique_ptr<ParameterAverager>(ParameterAverager* inner,
                                                                         const std::string& name)>;

// The localsgd worker program, one process per rank: parses the command line (its flags are
// defined in worker_app.cc), joins the coordinator, waits for a run, trains its shard with
// LocalSGD (the node's ranks average with Gloo or NCCL, the node leader syncs across nodes),
// evaluates, reports, saves the model (node 0's leader) and leaves. Returns the exit status:
// 0, 1 (an error), 2 (a usage error) or 128 + the signal that stopped it. `wrap` lets a test
// binary observe each sync (tests/testutil/dumping_worker_main.cc); the shipped worker
// (worker_main.cc) passes none.
int RunWorker(int argc, char** argv, const AveragerWrapper& wrap = nullptr);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_WORKER_APP_H_
