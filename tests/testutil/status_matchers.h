#ifndef LOCALSGD_TESTS_TESTUTIL_STATUS_MATCHERS_H_
#define LOCALSGD_TESTS_TESTUTIL_STATUS_MATCHERS_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace localsgd::testing {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// Matches an absl::Status or absl::StatusOr<T> with the given code and a message that
// contains `substring`.
MATCHER_P2(StatusIs, code, substring,
           std::string("has code ") + absl::StatusCodeToString(code) + " and a message with \"" +
               std::string(substring) + "\"") {
  const absl::Status& status = GetStatus(arg);
  *result_listener << "which is " << status;
  return status.code() == code &&
         status.message().find(std::string(substring)) != absl::string_view::npos;
}

MATCHER(IsOk, "is OK") {
  const absl::Status& status = GetStatus(arg);
  *result_listener << "which is " << status;
  return status.ok();
}

// Matches an OK absl::StatusOr<T> whose value equals `value`.
MATCHER_P(IsOkAndHolds, value, "is OK and holds " + ::testing::PrintToString(value)) {
  if (!arg.ok()) {
    *result_listener << "which is " << arg.status();
    return false;
  }
  *result_listener << "which holds " << ::testing::PrintToString(*arg);
  return *arg == value;
}

}  // namespace localsgd::testing

#endif  // LOCALSGD_TESTS_TESTUTIL_STATUS_MATCHERS_H_
