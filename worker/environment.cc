#include "worker/environment.h"

#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/auth.h"
#include "common/status_macros.h"

namespace localsgd {
namespace {

// The integer in variable `name`, nullopt when unset; an error names it when not an integer.
absl::StatusOr<std::optional<int>> IntVariable(const EnvironmentReader& environment,
                                               const std::string& name) {
  std::optional<std::string> text = environment(name);
  if (!text.has_value()) return std::optional<int>();
  int value = 0;
  if (!absl::SimpleAtoi(*text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": \"", *text, "\" is not an integer"));
  }
  return std::optional<int>(value);
}

absl::StatusOr<int> RequiredInt(const EnvironmentReader& environment, const std::string& name,
                                const std::string& because) {
  LOCALSGD_ASSIGN_OR_RETURN(std::optional<int> value, IntVariable(environment, name));
  if (!value.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not set (", because, ")"));
  }
  return *value;
}

// Slurm's SLURM_TASKS_PER_NODE ("2(x3),1": 2 tasks on each of 3 nodes, then 1) at `node`.
absl::StatusOr<int> TasksOnNode(const std::string& text, int node) {
  int index = 0;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int tasks = 0, repeat = 1;
    std::vector<absl::string_view> pieces = absl::StrSplit(part, "(x");
    bool ok = pieces.size() <= 2 && absl::SimpleAtoi(pieces[0], &tasks) && tasks > 0;
    if (ok && pieces.size() == 2) {
      absl::string_view count = pieces[1];
      ok = absl::ConsumeSuffix(&count, ")") && absl::SimpleAtoi(count, &repeat) && repeat > 0;
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("SLURM_TASKS_PER_NODE: cannot read \"", text, "\""));
    }
    if (node < index + repeat) return tasks;
    index += repeat;
  }
  return absl::InvalidArgumentError(absl::StrCat("SLURM_TASKS_PER_NODE: \"", text, "\" lists ",
                                                 index, " nodes, SLURM_NODEID is ", node));
}

std::string HostName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace

std::optional<std::string> ProcessEnvironment(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

absl::StatusOr<SessionOptions> SessionOptionsFromEnvironment(SessionOptions defaults,
                                                             const EnvironmentReader& environment) {
  SessionOptions options = std::move(defaults);
  auto set = [&](const std::string& name, std::string* field) {
    if (std::optional<std::string> value = environment(name); value.has_value()) *field = *value;
  };
  set("LOCALSGD_COORDINATOR", &options.coordinator);
  set("LOCALSGD_TLS_CA", &options.tls.ca_file);
  set("LOCALSGD_TLS_CERT", &options.tls.cert_file);
  set("LOCALSGD_TLS_KEY", &options.tls.key_file);
  set("LOCALSGD_RENDEZVOUS_DIR", &options.rendezvous_dir);
  set("LOCALSGD_DATA_ADDRESS", &options.data_address);
  set("LOCALSGD_DATA_TLS_CERT", &options.data_tls_cert);
  set("LOCALSGD_DATA_TLS_KEY", &options.data_tls_key);
  set("LOCALSGD_CHECKPOINT_DIR", &options.checkpoint_dir);
  if (std::optional<std::string> timeout = environment("LOCALSGD_CONNECT_TIMEOUT");
      timeout.has_value()) {
    double seconds = 0;
    if (!absl::SimpleAtod(*timeout, &seconds) || !(seconds > 0) || seconds > 1e6) {
      return absl::InvalidArgumentError(absl::StrCat("LOCALSGD_CONNECT_TIMEOUT: \"", *timeout,
                                                     "\" is not a number of seconds above 0"));
    }
    options.connect_timeout = absl::Seconds(seconds);
  }
  if (std::optional<std::string> steps = environment("LOCALSGD_ROUND_STEPS"); steps.has_value()) {
    if (!absl::SimpleAtoi(*steps, &options.round_steps) || options.round_steps < 0) {
      return absl::InvalidArgumentError(absl::StrCat("LOCALSGD_ROUND_STEPS: \"", *steps,
                                                     "\" is not a whole number of steps >= 0"));
    }
  }
  if (std::optional<std::string> file = environment("LOCALSGD_TOKEN_FILE"); file.has_value()) {
    LOCALSGD_ASSIGN_OR_RETURN(options.token, ReadSecretFile("LOCALSGD_TOKEN_FILE", *file));
  }
  if (std::optional<std::string> file = environment("LOCALSGD_NODE_KEY_FILE"); file.has_value()) {
    LOCALSGD_ASSIGN_OR_RETURN(options.node_key, ReadSecretFile("LOCALSGD_NODE_KEY_FILE", *file));
  }

  std::optional<int> node_rank;
  std::string rank_variables = "the defaults";
  if (environment("RANK").has_value()) {  // torchrun
    LOCALSGD_ASSIGN_OR_RETURN(options.rank, RequiredInt(environment, "RANK", "torchrun sets it"));
    LOCALSGD_ASSIGN_OR_RETURN(options.world_size,
                              RequiredInt(environment, "WORLD_SIZE", "RANK is set"));
    LOCALSGD_ASSIGN_OR_RETURN(std::optional<int> local_rank,
                              IntVariable(environment, "LOCAL_RANK"));
    LOCALSGD_ASSIGN_OR_RETURN(std::optional<int> local_world,
                              IntVariable(environment, "LOCAL_WORLD_SIZE"));
    rank_variables = "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE";
    options.local_rank = local_rank.value_or(0);
    options.local_world_size = local_world.value_or(1);
    LOCALSGD_ASSIGN_OR_RETURN(node_rank, IntVariable(environment, "GROUP_RANK"));
    if (!node_rank.has_value()) {
      LOCALSGD_ASSIGN_OR_RETURN(node_rank, IntVariable(environment, "NODE_RANK"));
    }
  } else if (environment("SLURM_PROCID").has_value()) {  // srun
    LOCALSGD_ASSIGN_OR_RETURN(options.rank,
                              RequiredInt(environment, "SLURM_PROCID", "srun sets it"));
    LOCALSGD_ASSIGN_OR_RETURN(options.world_size,
                              RequiredInt(environment, "SLURM_NTASKS", "SLURM_PROCID is set"));
    LOCALSGD_ASSIGN_OR_RETURN(options.local_rank,
                              RequiredInt(environment, "SLURM_LOCALID", "SLURM_PROCID is set"));
    LOCALSGD_ASSIGN_OR_RETURN(int node,
                              RequiredInt(environment, "SLURM_NODEID", "SLURM_PROCID is set"));
    std::optional<std::string> per_node = environment("SLURM_TASKS_PER_NODE");
    if (!per_node.has_value()) {
      return absl::InvalidArgumentError("SLURM_TASKS_PER_NODE: not set (SLURM_PROCID is set)");
    }
    LOCALSGD_ASSIGN_OR_RETURN(options.local_world_size, TasksOnNode(*per_node, node));
    set("SLURMD_NODENAME", &options.node_name);
    rank_variables = "SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_TASKS_PER_NODE";
  }
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(rank_variables, ": rank ", options.rank,
                                                   " must be in [0, world size ",
                                                   options.world_size, ")"));
  }
  if (options.local_world_size < 1 || options.local_rank < 0 ||
      options.local_rank >= options.local_world_size ||
      options.local_world_size > options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        rank_variables, ": local rank ", options.local_rank, " of ", options.local_world_size,
        ": must be in [0, local world size), which must be in [1, world size ", options.world_size,
        "]"));
  }
  if (node_rank.has_value() && options.node_name.empty()) {
    options.node_name = absl::StrCat(HostName(), "-", *node_rank);
  }
  set("LOCALSGD_NODE_NAME", &options.node_name);
  return options;
}

}  // namespace localsgd
