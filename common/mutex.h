#ifndef LOCALSGD_COMMON_MUTEX_H_
#define LOCALSGD_COMMON_MUTEX_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#if defined(__SANITIZE_THREAD__)
#define LOCALSGD_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LOCALSGD_TSAN 1
#endif
#endif

#ifdef LOCALSGD_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace localsgd {

// absl::Mutex as the coordinator uses it (lock, unlock, await a condition), made visible to
// ThreadSanitizer. Debian's abseil is not built with TSan, so TSan cannot see its lock and
// unlock and takes every access it guards for a race; under --config=tsan this class tells
// TSan about each acquire and release. Otherwise it is absl::Mutex and nothing more.
class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_.Lock();
    Acquired();
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    Released();
    mu_.Unlock();
  }
  // Releases the lock until `condition` holds, like absl::Mutex::Await. (abseil evaluates
  // the condition under its lock, on whichever thread holds it: each evaluation is annotated.)
  void Await(const absl::Condition& condition) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    AnnotatedCondition annotated{this, &condition};
    Released();
    mu_.Await(annotated.condition());
    Acquired();
  }
  bool AwaitWithTimeout(const absl::Condition& condition, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    AnnotatedCondition annotated{this, &condition};
    Released();
    const bool met = mu_.AwaitWithTimeout(annotated.condition(), timeout);
    Acquired();
    return met;
  }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() { mu_.AssertHeld(); }

 private:
  struct AnnotatedCondition {
    Mutex* mu;
    const absl::Condition* inner;
    bool Eval() {
      mu->Acquired();
      const bool met = inner->Eval();
      mu->Released();
      return met;
    }
    absl::Condition condition() { return absl::Condition(this, &AnnotatedCondition::Eval); }
  };

#ifdef LOCALSGD_TSAN
  void Acquired() { __tsan_acquire(this); }
  void Released() { __tsan_release(this); }
#else
  void Acquired() {}
  void Released() {}
#endif
  absl::Mutex mu_;
};

// Holds a Mutex for its scope, like absl::MutexLock.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_MUTEX_H_
