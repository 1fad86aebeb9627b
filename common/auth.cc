#include "common/auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/file_util.h"

namespace localsgd {
namespace {

constexpr absl::string_view kBearerPrefix = "Bearer ";

// Only the length can leak through timing, not how many leading characters match.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::Status CheckBearerToken(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                              absl::string_view expected) {
  if (expected.empty()) return absl::OkStatus();
  auto it = metadata.find(kAuthorizationKey);
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "missing bearer token: send metadata 'authorization: Bearer <token>'");
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::StartsWith(value, kBearerPrefix)) {
    return absl::UnauthenticatedError("authorization metadata is not 'Bearer <token>'");
  }
  if (!ConstantTimeEquals(value.substr(kBearerPrefix.size()), expected)) {
    return absl::PermissionDeniedError("wrong bearer token");
  }
  return absl::OkStatus();
}

void AddBearerToken(grpc::ClientContext* context, absl::string_view token) {
  if (token.empty()) return;
  context->AddMetadata(kAuthorizationKey, absl::StrCat(kBearerPrefix, token));
}

std::unique_ptr<grpc::ClientContext> AuthorizedContext(absl::string_view token,
                                                       absl::Duration timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  AddBearerToken(context.get(), token);
  return context;
}

absl::StatusOr<std::string> ResolveToken(absl::string_view token, const std::string& token_file) {
  if (!token.empty() && !token_file.empty()) {
    return absl::InvalidArgumentError("--token and --token_file: give at most one");
  }
  if (token_file.empty()) return std::string(token);
  return ReadSecretFile("--token_file", token_file);
}

absl::StatusOr<std::string> ReadSecretFile(absl::string_view what, const std::string& path) {
  // A secret is a line of text; the bound keeps a wrong path (a device, a huge file) harmless.
  constexpr int64_t kMaxSecretFileBytes = 64 * 1024;
  absl::StatusOr<std::string> contents = ReadFile(path, kMaxSecretFileBytes);
  if (!contents.ok()) {
    return absl::Status(contents.status().code(),
                        absl::StrCat(what, ": ", contents.status().message()));
  }
  std::string trimmed(absl::StripAsciiWhitespace(*contents));
  if (trimmed.empty())
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", path, " is empty"));
  return trimmed;
}

}  // namespace localsgd
