#include "exchange/stream_tag_check.h"

#include "absl/strings/str_cat.h"
#include "common/data_plane_tag.h"

namespace localsgd {

absl::Status StreamTagCheck::Check(const v1::ReduceHeader& header) const {
  const Identity self = identity_ ? identity_() : Identity();
  if (!self.credential.empty() &&
      DataPlaneTagMatches(
          header.member_tag(),
          DataPlaneTag(DataPlaneKey(self.credential),
                       DataPlaneStream{header.run_id(), header.round(), header.attempt(),
                                       header.member_id(), self.worker_id}))) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat("member_tag: this stream does not prove that the coordinator scheduled it from ",
                   header.member_id().substr(0, 128), " to ", self.worker_id, " in round ",
                   header.round(), " attempt ", header.attempt()));
}

}  // namespace localsgd
