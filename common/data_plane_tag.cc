#include "common/data_plane_tag.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/member_credential.h"

namespace localsgd {

std::string DataPlaneKey(absl::string_view member_credential) {
  return MemberCredentialDigest(member_credential);
}

std::string DataPlaneTag(absl::string_view key, const DataPlaneStream& stream) {
  // Names joined with NUL, which no worker id or run id holds.
  const std::string message = absl::StrCat(
      stream.run_id, std::string(1, '\0'), stream.round, std::string(1, '\0'), stream.attempt,
      std::string(1, '\0'), stream.sender, std::string(1, '\0'), stream.receiver);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &length);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(mac), length));
}

bool DataPlaneTagMatches(absl::string_view tag, absl::string_view expected) {
  return !expected.empty() && tag.size() == expected.size() &&
         CRYPTO_memcmp(tag.data(), expected.data(), tag.size()) == 0;
}

}  // namespace localsgd
