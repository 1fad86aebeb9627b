#include "common/address.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace localsgd {

std::string HostPort::ToString() const {
  if (absl::StrContains(host, ':')) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text, absl::string_view flag) {
  auto error = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": \"", text, "\" is not HOST:PORT (", why, ")"));
  };
  size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos) return error("no port");
  absl::string_view host = text.substr(0, colon);
  absl::string_view port_text = text.substr(colon + 1);
  if (absl::StartsWith(host, "[")) {
    if (!absl::EndsWith(host, "]") || host.size() < 3) return error("unclosed '['");
    host = host.substr(1, host.size() - 2);
  } else if (absl::StrContains(host, ':')) {
    return error("an IPv6 host needs brackets");
  }
  if (host.empty()) return error("empty host");
  for (char c : host) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '-' && c != '_' && c != ':' && c != '%') {
      return error("bad character in host");
    }
  }
  int port = 0;
  if (port_text.empty() || !absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535) {
    return error("port must be 0..65535");
  }
  return HostPort{std::string(host), port};
}

}  // namespace localsgd
