#ifndef LOCALSGD_COMMON_DATA_PLANE_TAG_H_
#define LOCALSGD_COMMON_DATA_PLANE_TAG_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace localsgd {

// Who sent a data-plane stream (docs/design.md, "Security"). Every member has a key that only
// it and the coordinator hold: the digest of its member credential (DataPlaneKey), which the
// coordinator keeps in place of the credential. For each attempt at a sharded round the
// coordinator gives every member the tags of the streams it is to open
// (RoundHeader.stream_tags), each made under the receiver's key; the receiver checks a
// stream's tag with its own key as soon as the stream opens, whatever round or attempt it
// names, so a stream the coordinator did not schedule is refused before anything is kept, and
// a tag is no use towards another receiver, sender, round or attempt.
struct DataPlaneStream {
  std::string run_id;
  int64_t round = 0;
  uint64_t attempt = 0;
  std::string sender;    // worker id
  std::string receiver;  // worker id
};

// The key of the member holding `member_credential`: its digest (MemberCredentialDigest).
std::string DataPlaneKey(absl::string_view member_credential);

// HMAC-SHA256 of the stream's names under `key` (the receiver's), as 64 hex digits.
std::string DataPlaneTag(absl::string_view key, const DataPlaneStream& stream);

// Whether `tag` is `expected`, in a time that does not depend on where they differ. Nothing
// matches an empty `expected`.
bool DataPlaneTagMatches(absl::string_view tag, absl::string_view expected);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_DATA_PLANE_TAG_H_
