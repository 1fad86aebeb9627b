#ifndef LOCALSGD_COMMON_DATA_PLANE_TAG_H_
#define LOCALSGD_COMMON_DATA_PLANE_TAG_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace localsgd {

// Who sent a data-plane stream (docs/design.md, "Security"). For each attempt at a sharded
// round the coordinator gives every member its own random key (RoundHeader.data_key) and,
// for each member, the tag that member's streams to this member must carry
// (RoundHeader.peer_tags). A member tags each stream it opens with its key and the receiver's
// id, so a receiver can tell it came from that member, and a tag seen by one receiver is no
// use towards another.
struct DataPlaneStream {
  std::string run_id;
  int64_t round = 0;
  uint64_t attempt = 0;
  std::string sender;    // worker id
  std::string receiver;  // worker id
};

// HMAC-SHA256 of the stream's names under `key`, as 64 hex digits.
std::string DataPlaneTag(absl::string_view key, const DataPlaneStream& stream);

// Whether `tag` is `expected`, in a time that does not depend on where they differ. Nothing
// matches an empty `expected`.
bool DataPlaneTagMatches(absl::string_view tag, absl::string_view expected);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_DATA_PLANE_TAG_H_
