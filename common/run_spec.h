#ifndef LOCALSGD_COMMON_RUN_SPEC_H_
#define LOCALSGD_COMMON_RUN_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/localsgd/v1/run_spec.pb.h"

namespace localsgd {

// Most ranks (worker processes) one node may have, and so most workers one node leader's
// contribution to a round may stand for.
inline constexpr int kMaxRanksPerNode = 1024;
// RunSpec.ring_streams at most.
inline constexpr int kMaxRingStreams = 8;

// Samples of the synthetic dataset when the spec does not say.
inline constexpr int64_t kDefaultSyntheticSamples = 8192;

// The built-in models (ModelSpec.builtin), and their names as a list for errors: "mlp, cnn".
inline constexpr absl::string_view kBuiltinModels[] = {"mlp", "cnn"};
bool IsBuiltinModel(absl::string_view name);
std::string BuiltinModelList();

// The model as people read it: the built-in's name, the TorchScript path, or "<name> (custom)".
std::string ModelName(const v1::ModelSpec& model);

// Parses a RunSpec written as text-format protobuf. INVALID_ARGUMENT carries the line and
// column of the first error.
absl::StatusOr<v1::RunSpec> ParseRunSpecText(absl::string_view text);

// Checks every field of a spec as an operator wrote it (before defaults). The error is
// INVALID_ARGUMENT and starts with the field's path, e.g. "spec.optimizer.lr: must be > 0".
absl::Status ValidateRunSpec(const v1::RunSpec& spec);

// The spec with every default of run_spec.proto filled in (enums made concrete, optional
// fields set), so that status shows what actually runs. Call on a validated spec.
v1::RunSpec WithDefaults(const v1::RunSpec& spec);

// ValidateRunSpec, then WithDefaults.
absl::StatusOr<v1::RunSpec> NormalizeRunSpec(const v1::RunSpec& spec);

// Whether a commit after which every part of the model synced at `synced_step` or later ends
// the run: it reached total_steps.
bool CommitEndsRun(const v1::RunSpec& spec, int64_t synced_step);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_RUN_SPEC_H_
