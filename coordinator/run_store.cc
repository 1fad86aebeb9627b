#include "coordinator/run_store.h"

#include <google/protobuf/text_format.h>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace localsgd {

absl::StatusOr<RunStore> RunStore::Open(const std::string& state_dir) {
  if (absl::Status status = MakeDirectories(state_dir); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat("--state_dir: ", status.message()));
  }
  return RunStore(absl::StrCat(state_dir, "/state.textproto"));
}

absl::StatusOr<std::optional<v1::SavedState>> RunStore::Load() const {
  absl::StatusOr<std::string> text = ReadChecksummedFile(path_);
  if (absl::IsNotFound(text.status())) return std::optional<v1::SavedState>();
  LOCALSGD_RETURN_IF_ERROR(text.status());
  v1::SavedState state;
  if (!google::protobuf::TextFormat::ParseFromString(*text, &state)) {
    return absl::DataLossError(absl::StrCat(
        path_, " is corrupt (not a SavedState text proto); move it away to start afresh"));
  }
  return std::optional<v1::SavedState>(std::move(state));
}

absl::Status RunStore::Save(const v1::SavedState& state) const {
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(state, &text)) {
    return absl::InternalError("cannot print the saved state");
  }
  return WriteChecksummedFile(path_, text);
}

}  // namespace localsgd
