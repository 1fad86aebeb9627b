#ifndef LOCALSGD_COMMON_LISTEN_SOCKET_H_
#define LOCALSGD_COMMON_LISTEN_SOCKET_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/address.h"

namespace localsgd {

// A listening TCP socket on `address` (SO_REUSEADDR, not SO_REUSEPORT, close-on-exec), and
// the port it got. UNAVAILABLE naming `flag` and saying why, in one line: "the address is
// already in use" when another process listens there.
struct ListenSocket {
  int fd = -1;
  int port = 0;
};
absl::StatusOr<ListenSocket> Listen(const HostPort& address, absl::string_view flag);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_LISTEN_SOCKET_H_
