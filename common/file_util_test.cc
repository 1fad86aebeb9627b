#include "common/file_util.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

TEST(FileUtilTest, WriteThenReadBack) {
  std::string path = TempDir() + "/atomic.bin";
  std::string payload("a\0b\nc", 5);
  ASSERT_TRUE(WriteFileAtomically(path, payload).ok());
  auto read = ReadFile(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, payload);
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());
  EXPECT_EQ(*ReadFile(path), "second");
}

TEST(FileUtilTest, MissingFileIsNotFoundAndNamesThePath) {
  auto read = ReadFile(TempDir() + "/does-not-exist");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(read.status().message().find("does-not-exist"), std::string::npos);
}

TEST(FileUtilTest, WriteIntoMissingFolderFails) {
  EXPECT_FALSE(WriteFileAtomically(TempDir() + "/no/such/dir/f", "x").ok());
}

TEST(FileUtilTest, MakeDirectoriesIsIdempotent) {
  std::string dir = TempDir() + "/a/b/c";
  ASSERT_TRUE(MakeDirectories(dir).ok());
  ASSERT_TRUE(MakeDirectories(dir).ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/f", "x").ok());
  EXPECT_EQ(MakeDirectories(dir + "/f").code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace localsgd
