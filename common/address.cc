#include "common/address.h"

#include <arpa/inet.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

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

bool IsLoopbackHost(absl::string_view host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr v4{};
  const std::string text(host);
  return inet_pton(AF_INET, text.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

absl::StatusOr<std::string> ResolveAdvertisedAddress(absl::string_view advertised,
                                                     absl::string_view peer,
                                                     absl::string_view field) {
  if (advertised.empty()) return std::string();
  if (advertised.size() > 300) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": longer than 300 characters"));
  }
  // A bare ":PORT" asks for the peer's host.
  const std::string text = absl::StartsWith(advertised, ":") ? absl::StrCat("0.0.0.0", advertised)
                                                             : std::string(advertised);
  LOCALSGD_ASSIGN_OR_RETURN(HostPort address, ParseHostPort(text, field));
  if (address.port == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": port 0 (advertise the port the server actually listens on)"));
  }
  if (address.host == "0.0.0.0" || address.host == "::") {
    absl::string_view rest = peer;
    if (!absl::ConsumePrefix(&rest, "ipv4:") && !absl::ConsumePrefix(&rest, "ipv6:")) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": the host is a wildcard and this call did not come over IP (", peer,
                       "); give the host"));
    }
    LOCALSGD_ASSIGN_OR_RETURN(HostPort from, ParseHostPort(rest, "peer"));
    address.host = from.host;
  }
  return address.ToString();
}

}  // namespace localsgd
