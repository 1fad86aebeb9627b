#ifndef LOCALSGD_COMMON_MALLOC_TUNING_H_
#define LOCALSGD_COMMON_MALLOC_TUNING_H_

namespace localsgd {

// Parameter streaming allocates and frees MiB-sized buffers (messages, chunks) all the time.
// glibc serves those with fresh mmap()s, so every chunk paid for page faults and page
// zeroing (a quarter of the coordinator's CPU in bench/averaging_bench.py). This keeps such
// buffers on the heap and the heap from being trimmed, so they are reused. Call once, first
// thing in main().
void TuneMallocForLargeBuffers();

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_MALLOC_TUNING_H_
