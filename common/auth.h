#ifndef LOCALSGD_COMMON_AUTH_H_
#define LOCALSGD_COMMON_AUTH_H_

#include <grpcpp/client_context.h>
#include <grpcpp/support/string_ref.h>

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace localsgd {

// The metadata key that carries "Bearer <token>" (gRPC lower-cases keys).
inline constexpr char kAuthorizationKey[] = "authorization";

// Checks the call's `authorization: Bearer <token>` metadata against `expected`. An empty
// `expected` means auth is off and every call passes. A missing or malformed header is
// UNAUTHENTICATED; a wrong token is PERMISSION_DENIED. The comparison time does not depend
// on how many leading characters match.
absl::Status CheckBearerToken(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                              absl::string_view expected);

// Adds the bearer token to an outgoing call; does nothing when `token` is empty.
void AddBearerToken(grpc::ClientContext* context, absl::string_view token);

// A context for one call that carries the bearer token (if any) and ends after `timeout`.
std::unique_ptr<grpc::ClientContext> AuthorizedContext(absl::string_view token,
                                                       absl::Duration timeout);

// The token a binary uses, from its --token and --token_file flags (at most one of them).
// The file's content is trimmed of surrounding whitespace and must not be empty.
absl::StatusOr<std::string> ResolveToken(absl::string_view token, const std::string& token_file);

// A secret kept in a file (a token, a node key): its first 64 KiB at most, trimmed of
// surrounding whitespace, not empty. Errors name `what` (the flag or variable that gave `path`).
absl::StatusOr<std::string> ReadSecretFile(absl::string_view what, const std::string& path);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_AUTH_H_
