#include "common/client_tls_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "common/tls.h"

ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA that the coordinator's certificate must chain to; set: connect over TLS.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate (chain) for a coordinator that requires mutual TLS.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");

namespace localsgd {

ClientTls ClientTlsFromFlags() {
  return ClientTls{absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
                   absl::GetFlag(FLAGS_tls_key)};
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFlags() {
  return MakeChannelCredentials(ClientTlsFromFlags());
}

void HelpShowsTlsFlags(std::string main_file) {
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [main_file](absl::string_view path) {
    return absl::StrContains(path, main_file) || absl::StrContains(path, "client_tls_flags");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace localsgd
