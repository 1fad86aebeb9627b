#ifndef LOCALSGD_WORKER_WORKER_APP_H_
#define LOCALSGD_WORKER_WORKER_APP_H_

#include "worker/replica.h"

namespace localsgd {

// The localsgd worker program, one process per rank: parses the command line
// (worker/worker_flags.h), joins the coordinator and waits for a run (Replica::Connect), trains
// its shard (worker/trainer.h, over the replica's TrainingSteps: the node's ranks average with
// Gloo or NCCL, the node leader syncs across nodes), evaluates, reports, saves the run's final
// model (node 0's leader) and leaves (Replica::Finish, or Leave when preempted or failed). Returns
// the exit status: 0, 1 (an error), 2 (a usage error) or 128 + the signal that stopped it. `wrap`
// lets a test binary observe each sync (tests/testutil/dumping_worker_main.cc); the shipped worker
// (worker_main.cc) passes none.
int RunWorker(int argc, char** argv, const AveragerWrapper& wrap = nullptr);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_WORKER_APP_H_
