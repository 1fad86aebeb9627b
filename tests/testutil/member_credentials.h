#ifndef LOCALSGD_TESTS_TESTUTIL_MEMBER_CREDENTIALS_H_
#define LOCALSGD_TESTS_TESTUTIL_MEMBER_CREDENTIALS_H_

#include <functional>
#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd::testing {

// What a test's members were given at Join (JoinResponse.member_credential), by worker id, for
// their later calls. Thread-safe: a test may join on one thread while a member syncs on another.
class MemberCredentials {
 public:
  void Keep(const v1::JoinResponse& joined) {
    absl::MutexLock lock(&mu_);
    credentials_[joined.worker_id()] = joined.member_credential();
  }
  // Empty for a worker that never joined.
  std::string Get(const std::string& worker_id) const {
    absl::MutexLock lock(&mu_);
    auto it = credentials_.find(worker_id);
    return it == credentials_.end() ? "" : it->second;
  }
  // SyncMember::credential for `worker_id`: its latest credential when called.
  std::function<std::string()> Of(const std::string& worker_id) const {
    return [this, worker_id] { return Get(worker_id); };
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> credentials_;
};

}  // namespace localsgd::testing

#endif  // LOCALSGD_TESTS_TESTUTIL_MEMBER_CREDENTIALS_H_
