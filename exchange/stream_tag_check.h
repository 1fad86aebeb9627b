#ifndef LOCALSGD_EXCHANGE_STREAM_TAG_CHECK_H_
#define LOCALSGD_EXCHANGE_STREAM_TAG_CHECK_H_

#include <functional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// Whether the coordinator scheduled a data-plane stream to this member (docs/design.md,
// "Security"): the stream's ReduceHeader.member_tag must be the tag of its run, round, attempt,
// sender and this member under this member's key (DataPlaneKey of its credential). Checked as
// a stream opens, before anything of it is kept, whatever round or attempt it names.
// Thread-safe when `identity` is.
class StreamTagCheck {
 public:
  // This member as of now: it changes when the member joins again.
  struct Identity {
    std::string worker_id;
    std::string credential;  // JoinResponse.member_credential of its latest Join
  };
  explicit StreamTagCheck(std::function<Identity()> identity) : identity_(std::move(identity)) {}

  // PERMISSION_DENIED naming member_tag when the tag is not the one for the header's names.
  absl::Status Check(const v1::ReduceHeader& header) const;

 private:
  const std::function<Identity()> identity_;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_STREAM_TAG_CHECK_H_
