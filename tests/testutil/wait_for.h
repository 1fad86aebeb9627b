#ifndef LOCALSGD_TESTS_TESTUTIL_WAIT_FOR_H_
#define LOCALSGD_TESTS_TESTUTIL_WAIT_FOR_H_

#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace localsgd {

// Polls `condition` (every millisecond) until it holds or `timeout` has passed; returns
// whether it held. Tests wait on conditions, never for a fixed time: ASSERT_TRUE(WaitFor(...,
// generous timeout)) for what must happen, EXPECT_FALSE(WaitFor(..., window)) for what must
// not happen within a window.
inline bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

}  // namespace localsgd

#endif  // LOCALSGD_TESTS_TESTUTIL_WAIT_FOR_H_
