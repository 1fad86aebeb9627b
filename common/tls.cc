#include "common/tls.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace localsgd {
namespace {

// Reads a PEM file named by `flag`.
absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view flag) {
  constexpr int64_t kMaxPemBytes = 1 << 20;  // a certificate chain or a key
  absl::StatusOr<std::string> pem = ReadFile(path, kMaxPemBytes);
  if (!pem.ok())
    return absl::Status(pem.status().code(), absl::StrCat(flag, ": ", pem.status().message()));
  if (!absl::StrContains(*pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a PEM file"));
  }
  return pem;
}

// Both or neither of a certificate and its key.
absl::Status CheckPair(const std::string& cert, const std::string& key, absl::string_view cert_flag,
                       absl::string_view key_flag) {
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(cert.empty() ? cert_flag : key_flag,
                                                   ": required with ",
                                                   cert.empty() ? key_flag : cert_flag));
  }
  return absl::OkStatus();
}

// Reads the certificate and key files named by --tls_cert and --tls_key.
absl::Status ReadCertAndKey(const std::string& cert_file, const std::string& key_file,
                            std::string* cert, std::string* key) {
  LOCALSGD_ASSIGN_OR_RETURN(std::string cert_pem, ReadPem(cert_file, "--tls_cert"));
  LOCALSGD_ASSIGN_OR_RETURN(std::string key_pem, ReadPem(key_file, "--tls_key"));
  *cert = std::move(cert_pem);
  *key = std::move(key_pem);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTls& tls) {
  if (absl::Status s = CheckPair(tls.cert_file, tls.key_file, "--tls_cert", "--tls_key"); !s.ok()) {
    return s;
  }
  if (tls.cert_file.empty()) {
    if (!tls.client_ca_file.empty()) {
      return absl::InvalidArgumentError("--tls_client_ca: needs --tls_cert and --tls_key");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  if (absl::Status s =
          ReadCertAndKey(tls.cert_file, tls.key_file, &pair.cert_chain, &pair.private_key);
      !s.ok()) {
    return s;
  }
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back(std::move(pair));
  options.client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  if (!tls.client_ca_file.empty()) {
    LOCALSGD_ASSIGN_OR_RETURN(std::string ca, ReadPem(tls.client_ca_file, "--tls_client_ca"));
    options.pem_root_certs = ca;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTls& tls) {
  if (absl::Status s = CheckPair(tls.cert_file, tls.key_file, "--tls_cert", "--tls_key"); !s.ok()) {
    return s;
  }
  if (tls.ca_file.empty()) {
    if (!tls.cert_file.empty()) {
      return absl::InvalidArgumentError("--tls_cert: needs --tls_ca (the coordinator's CA)");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions options;
  LOCALSGD_ASSIGN_OR_RETURN(std::string ca, ReadPem(tls.ca_file, "--tls_ca"));
  options.pem_root_certs = ca;
  if (!tls.cert_file.empty()) {
    if (absl::Status s = ReadCertAndKey(tls.cert_file, tls.key_file, &options.pem_cert_chain,
                                        &options.pem_private_key);
        !s.ok()) {
      return s;
    }
  }
  return grpc::SslCredentials(options);
}

}  // namespace localsgd
