#ifndef LOCALSGD_COMMON_TLS_H_
#define LOCALSGD_COMMON_TLS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace localsgd {

// TLS for the coordinator's gRPC port. Files are PEM.
struct ServerTls {
  std::string cert_file;  // the server's certificate chain; empty: plaintext
  std::string key_file;   // its private key
  // CA that client certificates must chain to; set: mutual TLS (clients without a valid
  // certificate are refused during the handshake).
  std::string client_ca_file;

  // "plaintext", "TLS" or "mutual TLS": how clients reach the server, for people.
  const char* Name() const {
    return cert_file.empty() ? "plaintext" : client_ca_file.empty() ? "TLS" : "mutual TLS";
  }
};

// TLS for workers and localsgdctl.
struct ClientTls {
  std::string ca_file;    // CA that the coordinator's certificate must chain to; empty: plaintext
  std::string cert_file;  // this client's certificate chain (for mutual TLS), with key_file
  std::string key_file;
};

// Server credentials for the options: insecure when no certificate is given. Errors name the
// flag (--tls_cert, --tls_key, --tls_client_ca) of a file that is missing, unreadable or not
// PEM, or a key without a certificate.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTls& tls);

// Channel credentials: insecure without a CA; otherwise TLS verifying the server against the
// CA, presenting the client certificate when given. Errors name the flag (--tls_ca,
// --tls_cert, --tls_key).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTls& tls);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_TLS_H_
