#include "coordinator/run_store.h"

#include <google/protobuf/text_format.h>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"

namespace localsgd {

absl::StatusOr<RunStore> RunStore::Open(const std::string& state_dir) {
  if (absl::Status status = MakeDirectories(state_dir); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat("--state_dir: ", status.message()));
  }
  return RunStore(absl::StrCat(state_dir, "/run.textproto"));
}

absl::StatusOr<std::optional<v1::RunInfo>> RunStore::Load() const {
  absl::StatusOr<std::string> text = ReadFile(path_);
  if (absl::IsNotFound(text.status())) return std::optional<v1::RunInfo>();
  if (!text.ok()) return text.status();
  v1::RunInfo run;
  if (!google::protobuf::TextFormat::ParseFromString(*text, &run)) {
    return absl::DataLossError(
        absl::StrCat(path_, " is corrupt (not a RunInfo text proto); move it away to start fresh"));
  }
  return std::optional<v1::RunInfo>(std::move(run));
}

absl::Status RunStore::Save(const v1::RunInfo& run) const {
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(run, &text)) {
    return absl::InternalError("cannot print the run record");
  }
  return WriteFileAtomically(path_, text);
}

}  // namespace localsgd
