#ifndef LOCALSGD_COMMON_ADDRESS_H_
#define LOCALSGD_COMMON_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace localsgd {

// A listening or connecting address: host (a name, an IPv4 address or a bracketed IPv6
// address) and a port in [0, 65535]; port 0 asks the system for a free port.
struct HostPort {
  std::string host;  // without brackets
  int port = 0;

  // "host:port", with brackets around an IPv6 host.
  std::string ToString() const;
};

// Parses "HOST:PORT" ("127.0.0.1:0", "[::1]:8080", "node-1:50051"). `flag` names the flag
// or field in the error message.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text, absl::string_view flag);

// Whether `host` (as in HostPort) can only be reached from this machine: "localhost", an
// address in 127.0.0.0/8, or ::1. Wildcards ("", "0.0.0.0", "::") and other names are not.
bool IsLoopbackHost(absl::string_view host);

// A node leader's advertised data-plane address (JoinRequest.data_address) made concrete: a
// wildcard or empty host ("", "0.0.0.0", "::") becomes the host of `peer`, the address the
// Join came from as gRPC names it ("ipv4:10.0.0.5:41234", "ipv6:[::1]:41234"). Empty stays
// empty (no data plane). INVALID_ARGUMENT naming `field` for a malformed address, port 0, or
// a wildcard host when the peer is not an IP address.
absl::StatusOr<std::string> ResolveAdvertisedAddress(absl::string_view advertised,
                                                     absl::string_view peer,
                                                     absl::string_view field);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_ADDRESS_H_
