#ifndef LOCALSGD_COMMON_FILE_UTIL_H_
#define LOCALSGD_COMMON_FILE_UTIL_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace localsgd {

// Reads a whole regular file of at most `max_bytes`. NOT_FOUND names the path when it does
// not exist; INVALID_ARGUMENT names it when it is not a regular file (a FIFO, a device such as
// /dev/zero, a folder: refused at once, never read or waited on) or holds more than
// `max_bytes`.
absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes);

// Replaces `path` with `contents` so that a reader (or a crash) sees either the old or the new
// file, never a mix: writes a temporary file beside it, fsyncs it, renames it over `path` and
// fsyncs the folder.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// A file whose payload is checked when read: WriteChecksummedFile writes (atomically, as
// above) one header line "# localsgd-checksummed v1 crc32=<8 hex digits> length=<bytes>" and
// then the payload; ReadChecksummedFile returns the payload, or DATA_LOSS naming the path when
// the header is missing, the file is truncated or the checksum does not match (and ReadFile's
// errors, with no bound on the size). (The header is a comment line, so a text-format proto
// payload stays readable.) The payload may be given in pieces, written one after the other
// (a large buffer need not be copied into one string first).
absl::Status WriteChecksummedFile(const std::string& path,
                                  std::initializer_list<absl::string_view> payload);
inline absl::Status WriteChecksummedFile(const std::string& path, absl::string_view payload) {
  return WriteChecksummedFile(path, {payload});
}
absl::StatusOr<std::string> ReadChecksummedFile(const std::string& path);

// WriteChecksummedFile for a payload too large to hold at once: its length is given first and
// the payload appended in pieces as they come. Nothing replaces `path` until Commit, which
// fails unless exactly `length` bytes were appended; a writer destroyed before (or after a
// failure) removes its temporary file. Thread-compatible.
class ChecksummedFileWriter {
 public:
  static absl::StatusOr<ChecksummedFileWriter> Open(const std::string& path, uint64_t length);
  ChecksummedFileWriter(ChecksummedFileWriter&& other) noexcept;
  ChecksummedFileWriter& operator=(ChecksummedFileWriter&&) = delete;
  ~ChecksummedFileWriter();

  absl::Status Append(absl::string_view piece);
  absl::Status Commit();

 private:
  ChecksummedFileWriter(std::string path, std::string temp, int fd, uint64_t length)
      : path_(std::move(path)), temp_(std::move(temp)), fd_(fd), length_(length) {}
  // Closes and removes the temporary file; returns `status`.
  absl::Status Fail(absl::Status status);

  std::string path_;
  std::string temp_;
  int fd_ = -1;  // -1 once committed or failed
  uint64_t length_ = 0;
  uint64_t written_ = 0;
  uint32_t crc_ = 0;
};

// Creates `path` and its parents as needed (like mkdir -p).
absl::Status MakeDirectories(const std::string& path);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_FILE_UTIL_H_
