#ifndef LOCALSGD_WORKER_ENVIRONMENT_H_
#define LOCALSGD_WORKER_ENVIRONMENT_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/session.h"

namespace localsgd {

// Reads one environment variable: its value, or nullopt when unset.
using EnvironmentReader = std::function<std::optional<std::string>(const std::string& name)>;
// The process's own environment.
std::optional<std::string> ProcessEnvironment(const std::string& name);

// SessionOptions from the environment, as a launcher sets it (docs/reference.md,
// "Environment"), so that `torchrun`, Slurm's `srun` and scripts/launch.sh start a program
// unchanged:
//  - where to connect: LOCALSGD_COORDINATOR (HOST:PORT), LOCALSGD_TOKEN_FILE, LOCALSGD_TLS_CA,
//    LOCALSGD_TLS_CERT, LOCALSGD_TLS_KEY; the node: LOCALSGD_NODE_NAME, LOCALSGD_NODE_KEY_FILE,
//    LOCALSGD_RENDEZVOUS_DIR, LOCALSGD_DATA_ADDRESS, LOCALSGD_DATA_TLS_CERT and _KEY,
//    LOCALSGD_CHECKPOINT_DIR;
//  - the ranks: torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK (or
//    NODE_RANK); else srun's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID and
//    SLURM_TASKS_PER_NODE (uneven nodes too); else one process, rank 0 of 1.
// The node's name, unless LOCALSGD_NODE_NAME gives it: Slurm's SLURMD_NODENAME; under
// torchrun with a node rank, "HOST-RANK" (so that nodes tried on one machine stay apart);
// else the host name. `defaults` gives what the environment leaves unset. Errors name the
// variable that is wrong.
absl::StatusOr<SessionOptions> SessionOptionsFromEnvironment(
    SessionOptions defaults = SessionOptions(),
    const EnvironmentReader& environment = ProcessEnvironment);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_ENVIRONMENT_H_
