#ifndef LOCALSGD_COMMON_MEMBER_CREDENTIAL_H_
#define LOCALSGD_COMMON_MEMBER_CREDENTIAL_H_

#include <string>

#include "absl/strings/string_view.h"

namespace localsgd {

// A member's credential (docs/design.md, "Security"): a secret the coordinator hands one
// worker at Join and that worker carries on every later call in its name. The coordinator
// keeps only its digest, in memory and in the state directory.

// A new credential: 32 random bytes from OpenSSL's generator, as 64 hex digits.
std::string NewMemberCredential();

// The SHA-256 digest of `credential`, as 64 hex digits.
std::string MemberCredentialDigest(absl::string_view credential);

// Whether `credential` is the one whose digest is `digest`; the comparison time does not
// depend on how many leading digits match.
bool MemberCredentialMatches(absl::string_view credential, absl::string_view digest);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_MEMBER_CREDENTIAL_H_
