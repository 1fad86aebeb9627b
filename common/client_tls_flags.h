#ifndef LOCALSGD_COMMON_CLIENT_TLS_FLAGS_H_
#define LOCALSGD_COMMON_CLIENT_TLS_FLAGS_H_

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/tls.h"

namespace localsgd {

// The --tls_ca, --tls_cert and --tls_key flags shared by the worker and localsgdctl, as
// channel credentials (see MakeChannelCredentials).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFlags();

// The same flags' values.
ClientTls ClientTlsFromFlags();

// For a client's `main`: --help lists the flags defined in files whose path contains
// `main_file` and these TLS flags (by default it shows the main file's only).
void HelpShowsTlsFlags(std::string main_file);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_CLIENT_TLS_FLAGS_H_
