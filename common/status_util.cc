#include "common/status_util.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace localsgd {

std::string Quoted(absl::string_view text) {
  if (text.size() <= kMaxEchoedBytes) return absl::StrCat("\"", absl::CHexEscape(text), "\"");
  return absl::StrCat("\"", absl::CHexEscape(text.substr(0, kMaxEchoedBytes)), "\"... (",
                      text.size(), " bytes)");
}

std::string ConnectionHint(const absl::Status& status) {
  if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) {
    return " (is a coordinator listening there? check --coordinator, and with TLS --tls_ca)";
  }
  if (absl::IsUnauthenticated(status)) {
    return " (give the coordinator's token with --token_file=FILE or --token)";
  }
  // A refusal that names its field (node_key, member_credential) says itself what is wrong.
  if (absl::IsPermissionDenied(status) && !absl::StrContains(status.message(), "node_key:") &&
      !absl::StrContains(status.message(), "member_credential:")) {
    return " (the token differs from the coordinator's)";
  }
  return "";
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message().substr(0, kMaxStatusMessageBytes));
  if (status.message().size() > kMaxStatusMessageBytes) {
    absl::StrAppend(&message, "... (", status.message().size(), " bytes)");
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::move(message));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace localsgd
