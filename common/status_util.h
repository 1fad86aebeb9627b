#ifndef LOCALSGD_COMMON_STATUS_UTIL_H_
#define LOCALSGD_COMMON_STATUS_UTIL_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace localsgd {

// Maps an absl::Status to the grpc::Status with the same code and message. The two code
// enums share their numbering (both follow google.rpc.Code).
grpc::Status ToGrpcStatus(const absl::Status& status);

// The inverse of ToGrpcStatus, for clients that work with absl::Status.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_STATUS_UTIL_H_
