#include "common/process_tuning.h"

#include <malloc.h>

#include "absl/synchronization/mutex.h"

namespace localsgd {

void TuneProcess() {
  // 32 MiB is the largest threshold glibc accepts on 64-bit systems (a larger one is refused).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  // One arena: with an arena per thread, every round faults in fresh pages for the chunks its
  // threads allocate. Small allocations still come from each thread's cache without the
  // arena's lock.
  mallopt(M_ARENA_MAX, 1);
#ifdef NDEBUG
  // Abseil's lock-order graph costs CPU on every lock of the data plane's hot path; debug
  // builds (the tests, the sanitizers) keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace localsgd
