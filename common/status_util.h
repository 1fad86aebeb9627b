#ifndef LOCALSGD_COMMON_STATUS_UTIL_H_
#define LOCALSGD_COMMON_STATUS_UTIL_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace localsgd {

// Longest message a gRPC status carries (gRPC sends it as metadata, whose size is limited):
// longer ones are cut here and say so.
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// Longest part of a client's id, name or path echoed in an error or a log line.
inline constexpr size_t kMaxEchoedBytes = 128;

// `text` (an id, name or path a client sent) quoted for an error or a log line: C-escaped,
// and cut to kMaxEchoedBytes with its full length said after.
std::string Quoted(absl::string_view text);

// What to check when a client's call to the coordinator failed with `status`, as " (...)",
// or "" when there is nothing to add: where it listens (UNAVAILABLE, DEADLINE_EXCEEDED), the
// token (UNAUTHENTICATED, and PERMISSION_DENIED unless it names node_key or member_credential).
std::string ConnectionHint(const absl::Status& status);

// Maps an absl::Status to the grpc::Status with the same code and message (cut to
// kMaxStatusMessageBytes). The two code enums share their numbering (both follow
// google.rpc.Code).
grpc::Status ToGrpcStatus(const absl::Status& status);

// The inverse of ToGrpcStatus, for clients that work with absl::Status.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_STATUS_UTIL_H_
