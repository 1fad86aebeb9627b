#include "common/malloc_tuning.h"

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

// The heaps glibc reports (malloc_info's <heap nr=...> elements): one per arena.
int Heaps() {
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  malloc_info(0, out);
  std::fclose(out);
  const std::string info(text, size);
  std::free(text);
  int heaps = 0;
  for (size_t at = info.find("<heap nr="); at != std::string::npos;
       at = info.find("<heap nr=", at + 1)) {
    ++heaps;
  }
  return heaps;
}

TEST(MallocTuningTest, ThreadsAllocateFromTheOneMainHeap) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers' allocators do not take mallopt's settings";
#endif
  TuneMallocForLargeBuffers();
  // Threads that each hold a large buffer at once: untuned, glibc gives them arenas of their
  // own (this test then sees several heaps).
  std::vector<std::thread> threads;
  std::vector<void*> buffers(4, nullptr);
  for (size_t i = 0; i < buffers.size(); ++i) {
    threads.emplace_back([&buffers, i] { buffers[i] = std::malloc(4 << 20); });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(Heaps(), 1);
  for (void* buffer : buffers) std::free(buffer);
}

}  // namespace
}  // namespace localsgd
