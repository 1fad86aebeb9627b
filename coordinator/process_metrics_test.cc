#include "coordinator/process_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <ctime>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

TEST(ProcessMetricsTest, ReadsThisProcess) {
  auto before = ReadProcessStats();
  ASSERT_TRUE(before.ok()) << before.status();
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) fds.push_back(open("/dev/null", O_RDONLY));
  // Some CPU time and some resident memory.
  std::vector<char> memory(64 << 20, 1);
  volatile double sink = 0;
  for (int i = 0; i < 20'000'000; ++i) sink = sink + i * 0.5;
  auto after = ReadProcessStats();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->open_fds, before->open_fds + 5);
  EXPECT_GT(after->cpu_seconds, 0);
  EXPECT_GE(after->cpu_seconds, before->cpu_seconds);
  EXPECT_GT(after->resident_bytes, 64.0 * (1 << 20));
  EXPECT_GE(after->virtual_bytes, after->resident_bytes);
  EXPECT_GT(after->max_fds, after->open_fds);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(after->start_time_seconds, now + 1);
  EXPECT_GT(after->start_time_seconds, now - 3600);
  for (int fd : fds) close(fd);
}

}  // namespace
}  // namespace localsgd
