#ifndef LOCALSGD_COMMON_MALLOC_TUNING_H_
#define LOCALSGD_COMMON_MALLOC_TUNING_H_

namespace localsgd {

// Parameter streaming allocates and frees MiB-sized buffers (messages, chunks, gRPC's read
// buffers) all the time, on many threads. glibc serves large buffers with fresh mmap()s, and
// gives each thread an arena of its own, whose heaps grow and give pages back as the threads
// come and go (rounds start their streams' threads anew): either way every buffer paid for page
// faults and page zeroing. This keeps such buffers on the one main heap, which is not trimmed,
// so they are reused. Call once, first thing in main(), before any thread starts.
void TuneMallocForLargeBuffers();

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_MALLOC_TUNING_H_
