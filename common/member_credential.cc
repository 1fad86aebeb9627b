#include "common/member_credential.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstdlib>

#include "absl/strings/escaping.h"

namespace localsgd {

std::string NewMemberCredential() {
  unsigned char bytes[32];
  // Fails only when the system has no entropy source; a predictable credential is worse than
  // no coordinator.
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) std::abort();
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

std::string MemberCredentialDigest(absl::string_view credential) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(credential.data()), credential.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

bool MemberCredentialMatches(absl::string_view credential, absl::string_view digest) {
  const std::string actual = MemberCredentialDigest(credential);
  return digest.size() == actual.size() &&
         CRYPTO_memcmp(actual.data(), digest.data(), actual.size()) == 0;
}

}  // namespace localsgd
