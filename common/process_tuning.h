#ifndef LOCALSGD_COMMON_PROCESS_TUNING_H_
#define LOCALSGD_COMMON_PROCESS_TUNING_H_

namespace localsgd {

// Settings for a process that streams parameters (the coordinator, a worker, the benchmarks'
// members). Call once, first thing in main(), before any thread starts.
//
// The allocator: parameter streaming allocates and frees MiB-sized buffers (messages, chunks,
// gRPC's read buffers) all the time, on many threads. glibc serves large buffers with fresh
// mmap()s, and gives each thread an arena of its own, whose heaps grow and give pages back as
// the threads come and go (rounds start their streams' threads anew): either way every buffer
// paid for page faults and page zeroing. This keeps such buffers on the one main heap, which
// is not trimmed, so they are reused.
//
// Locks: Debian builds abseil with assertions on, so absl::Mutex checks every lock it takes
// for a potential deadlock, which takes one process-wide lock and updates a graph of lock
// orders; gRPC's locks are absl::Mutex too. abseil's own release builds leave the check out.
// In a build without assertions (NDEBUG: `-c opt`) this turns it off; the tests, built with
// assertions, keep it.
void TuneProcess();

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_PROCESS_TUNING_H_
