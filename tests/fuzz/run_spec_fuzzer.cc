// Run spec parsing and validation on arbitrary text (what StartRun and localsgdctl accept):
// never crashes; a spec that validates normalises, and the normalised spec validates again.
#include <cstdint>
#include <cstdlib>

#include "common/run_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<localsgd::v1::RunSpec> spec = localsgd::ParseRunSpecText(text);
  if (!spec.ok()) return 0;
  if (!localsgd::ValidateRunSpec(*spec).ok()) return 0;
  absl::StatusOr<localsgd::v1::RunSpec> normalized = localsgd::NormalizeRunSpec(*spec);
  if (!normalized.ok() || !localsgd::ValidateRunSpec(*normalized).ok()) std::abort();
  return 0;
}
