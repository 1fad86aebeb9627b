#include "common/process_tuning.h"

#include <malloc.h>

#include "absl/synchronization/mutex.h"

namespace localsgd {

void TuneProcess() {
  // 32 MiB is the largest threshold glibc accepts on 64-bit systems (a larger one is refused).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  // One arena: a 4-leader bf16 round on loopback faulted in 5-13 MB of new pages per member
  // with an arena per thread, and about 0.1 MB with one; the members' CPU per round fell by about
  // a quarter (bench/RESULTS.md, 2026-12-02, "Codecs and the allocator"). Small allocations still
  // come from each thread's cache without the arena's lock, and training with 1 or 2 threads
  // ran as fast.
  mallopt(M_ARENA_MAX, 1);
#ifdef NDEBUG
  // Loopback rounds of 4 leaders at 100 MB (fp32) took about 10 % less time against Gloo's in
  // the same run; the check had been about 1 % of all CPU samples in GraphCycles alone
  // (bench/RESULTS.md, 2026-12-02, "Lock checks").
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace localsgd
