#include "common/node_key.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace localsgd {

std::string NodeKey(absl::string_view secret, absl::string_view node_name) {
  // A context of its own, so that the key of a node is no other HMAC of the same secret.
  const std::string message = absl::StrCat("localsgd node key", std::string(1, '\0'), node_name);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &length);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(mac), length));
}

bool IsNodeKey(absl::string_view secret, absl::string_view node_name, absl::string_view key) {
  const std::string expected = NodeKey(secret, node_name);
  return key.size() == expected.size() &&
         CRYPTO_memcmp(key.data(), expected.data(), key.size()) == 0;
}

}  // namespace localsgd
