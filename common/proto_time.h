#ifndef LOCALSGD_COMMON_PROTO_TIME_H_
#define LOCALSGD_COMMON_PROTO_TIME_H_

#include <google/protobuf/timestamp.pb.h>

#include "absl/time/time.h"

namespace localsgd {

// absl::Time <-> google.protobuf.Timestamp (nanosecond precision).
inline google::protobuf::Timestamp ToProtoTime(absl::Time time) {
  google::protobuf::Timestamp out;
  const int64_t nanos = absl::ToUnixNanos(time);
  int64_t seconds = nanos / 1'000'000'000;
  int64_t rest = nanos % 1'000'000'000;
  if (rest < 0) {
    rest += 1'000'000'000;
    --seconds;
  }
  out.set_seconds(seconds);
  out.set_nanos(static_cast<int32_t>(rest));
  return out;
}

inline absl::Time FromProtoTime(const google::protobuf::Timestamp& time) {
  return absl::FromUnixSeconds(time.seconds()) + absl::Nanoseconds(time.nanos());
}

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_PROTO_TIME_H_
