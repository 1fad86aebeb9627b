#include "common/file_util.h"

#include <sys/stat.h>
#include <unistd.h>

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
  auto read = ReadFile(path, 100);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, payload);
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());
  EXPECT_EQ(*ReadFile(path, 100), "second");
}

// Issue 50, finding 8: a token file named /dev/zero grew a process without bound, and a FIFO
// with no writer blocked it for good. Only regular files are read, and only up to the bound.
TEST(FileUtilTest, OnlyRegularFilesWithinTheBoundAreRead) {
  for (const std::string& path : {std::string("/dev/zero"), TempDir()}) {
    EXPECT_THAT(ReadFile(path, 100),
                testing::StatusIs(absl::StatusCode::kInvalidArgument, "is not a regular file"))
        << path;
  }
  const std::string fifo = TempDir() + "/fifo";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(ReadFile(fifo, 100),  // returns at once: nobody writes to it
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "fifo is not a regular file"));
  const std::string big = TempDir() + "/big";
  ASSERT_TRUE(WriteFileAtomically(big, std::string(101, 'x')).ok());
  EXPECT_THAT(ReadFile(big, 100),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "more than 100 bytes"));
  EXPECT_EQ(ReadFile(big, 101)->size(), 101u);
  // A file whose size fstat does not know (procfs) is read to its end.
  EXPECT_NE(ReadFile("/proc/self/status", 1 << 20)->find("VmRSS"), std::string::npos);
}

TEST(FileUtilTest, MissingFileIsNotFoundAndNamesThePath) {
  auto read = ReadFile(TempDir() + "/does-not-exist", 100);
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

// A payload in pieces (empty ones and a null one among them) reads back as their concatenation.
TEST(ChecksummedFileTest, APayloadInPiecesReadsBackWhole) {
  const std::string path = TempDir() + "/pieces.bin";
  const std::string big(1 << 20, '\x5a');
  ASSERT_THAT(WriteChecksummedFile(path, {"head", absl::string_view(), big, "", "tail"}), IsOk());
  auto read = ReadChecksummedFile(path);
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(*read, "head" + big + "tail");
}

TEST(ChecksummedFileTest, TruncatedFlippedOrHeaderlessFilesAreDataLoss) {
  const std::string path = TempDir() + "/damaged.bin";
  ASSERT_THAT(WriteChecksummedFile(path, "run_id: \"run-1\" round: 7\n"), IsOk());
  const std::string good = *ReadFile(path, 1 << 20);

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

// A streamed write replaces the file only at its commit, and only with the length it announced;
// an abandoned one leaves the old file and no temporary file behind.
TEST(ChecksummedFileTest, AStreamedWriteReplacesTheFileOnlyWhenComplete) {
  const std::string dir = TempDir() + "/streamed";
  ASSERT_THAT(MakeDirectories(dir), IsOk());
  const std::string path = dir + "/model.bin";
  ASSERT_THAT(WriteChecksummedFile(path, "old"), IsOk());
  {
    auto writer = ChecksummedFileWriter::Open(path, 6);
    ASSERT_THAT(writer, IsOk());
    ASSERT_THAT(writer->Append("abc"), IsOk());
    EXPECT_THAT(writer->Commit(), StatusIs(absl::StatusCode::kInvalidArgument, "3 of the 6"));
    EXPECT_THAT(writer->Append("def"), StatusIs(absl::StatusCode::kFailedPrecondition, "ended"));
  }
  {
    auto writer = ChecksummedFileWriter::Open(path, 4);
    ASSERT_THAT(writer, IsOk());
    EXPECT_THAT(writer->Append("abcde"), StatusIs(absl::StatusCode::kInvalidArgument, "4 bytes"));
  }
  { ASSERT_THAT(ChecksummedFileWriter::Open(path, 2)->Append("ab"), IsOk()); }  // abandoned
  EXPECT_EQ(*ReadChecksummedFile(path), "old");
  {
    auto writer = ChecksummedFileWriter::Open(path, 6);
    ASSERT_THAT(writer, IsOk());
    ASSERT_THAT(writer->Append("abc"), IsOk());
    ASSERT_THAT(writer->Append(""), IsOk());
    ASSERT_THAT(writer->Append("def"), IsOk());
    ASSERT_THAT(writer->Commit(), IsOk());
  }
  EXPECT_EQ(*ReadChecksummedFile(path), "abcdef");
  EXPECT_NE(access((path + ".tmp." + std::to_string(getpid())).c_str(), F_OK), 0);
}

TEST(ChecksummedFileTest, MissingFileIsNotFound) {
  EXPECT_THAT(ReadChecksummedFile(TempDir() + "/never-written"),
              StatusIs(absl::StatusCode::kNotFound, "never-written"));
}

}  // namespace
}  // namespace localsgd
