#include "common/file_util.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

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

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

TEST(ChecksummedFileTest, RoundTripsBinaryPayloads) {
  const std::string path = TempDir() + "/checked.bin";
  for (const std::string& payload :
       {std::string(), std::string("a\0b\nc", 5), std::string(1 << 20, '\xff')}) {
    ASSERT_THAT(WriteChecksummedFile(path, payload), IsOk());
    auto read = ReadChecksummedFile(path);
    ASSERT_THAT(read, IsOk());
    EXPECT_EQ(*read, payload);
  }
}

TEST(ChecksummedFileTest, TruncatedFlippedOrHeaderlessFilesAreDataLoss) {
  const std::string path = TempDir() + "/damaged.bin";
  ASSERT_THAT(WriteChecksummedFile(path, "run_id: \"run-1\" round: 7\n"), IsOk());
  const std::string good = *ReadFile(path);

  ASSERT_THAT(WriteFileAtomically(path, good.substr(0, good.size() - 3)), IsOk());
  EXPECT_THAT(ReadChecksummedFile(path), StatusIs(absl::StatusCode::kDataLoss, "truncated"));

  std::string flipped = good;
  flipped[flipped.size() - 4] ^= 0x01;  // "round: 7" -> "round: 6"
  ASSERT_THAT(WriteFileAtomically(path, flipped), IsOk());
  EXPECT_THAT(ReadChecksummedFile(path), StatusIs(absl::StatusCode::kDataLoss, "checksum"));

  ASSERT_THAT(WriteFileAtomically(path, good + "x"), IsOk());
  EXPECT_THAT(ReadChecksummedFile(path), StatusIs(absl::StatusCode::kDataLoss, "too long"));

  ASSERT_THAT(WriteFileAtomically(path, "run_id: \"run-1\"\n"), IsOk());
  EXPECT_THAT(ReadChecksummedFile(path), StatusIs(absl::StatusCode::kDataLoss, "damaged.bin"));

  ASSERT_THAT(WriteFileAtomically(path, "# localsgd-checksummed v1 crc32=zz length=1\nx"), IsOk());
  EXPECT_THAT(ReadChecksummedFile(path), StatusIs(absl::StatusCode::kDataLoss, "unreadable"));
}

TEST(ChecksummedFileTest, MissingFileIsNotFound) {
  EXPECT_THAT(ReadChecksummedFile(TempDir() + "/never-written"),
              StatusIs(absl::StatusCode::kNotFound, "never-written"));
}

}  // namespace
}  // namespace localsgd
