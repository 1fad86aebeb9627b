#include "common/process_tuning.h"

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
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

TEST(ProcessTuningTest, ThreadsAllocateFromTheOneMainHeap) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers' allocators do not take mallopt's settings";
#endif
  TuneProcess();
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

// Takes two locks in one order, then in the other: a potential deadlock.
void LockInBothOrders() {
  absl::Mutex a, b;
  a.Lock();
  b.Lock();
  b.Unlock();
  a.Unlock();
  b.Lock();
  a.Lock();
  a.Unlock();
  b.Unlock();
}

TEST(ProcessTuningTest, LockOrderChecksStayInBuildsWithAssertionsOnly) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "death tests fork, which ThreadSanitizer does not follow well";
#endif
  // The child runs this test alone, from a fresh start: the test above has tuned this process.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
#ifdef NDEBUG
  EXPECT_EXIT(
      {
        TuneProcess();
        LockInBothOrders();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
#else
  // Debian's abseil, built with assertions, aborts on the second order; TuneProcess keeps that.
  EXPECT_DEATH(
      {
        TuneProcess();
        LockInBothOrders();
      },
      "Potential Mutex deadlock");
#endif
}

}  // namespace
}  // namespace localsgd
