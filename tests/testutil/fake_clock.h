#ifndef LOCALSGD_TESTS_TESTUTIL_FAKE_CLOCK_H_
#define LOCALSGD_TESTS_TESTUTIL_FAKE_CLOCK_H_

#include <functional>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace localsgd::testing {

// A clock that moves only when told. Thread-safe.
class FakeClock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000)) : now_(start) {}

  absl::Time Now() const {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  // A clock function for Options structs; the FakeClock must outlive it.
  std::function<absl::Time()> AsFunction() {
    return [this] { return Now(); };
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace localsgd::testing

#endif  // LOCALSGD_TESTS_TESTUTIL_FAKE_CLOCK_H_
