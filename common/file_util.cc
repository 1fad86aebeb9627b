#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace localsgd {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  int err = errno;
  std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

std::string Parent(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

constexpr char kChecksumHeader[] = "# localsgd-checksummed v1";

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes) {
  // Non-blocking, so that opening a FIFO without a writer returns at once.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open", path);
  struct stat info;
  if (fstat(fd, &info) != 0) {
    absl::Status status = ErrnoError("cannot read", path);
    close(fd);
    return status;
  }
  if (!S_ISREG(info.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  auto too_large = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " holds more than ", max_bytes, " bytes, more than such a file can"));
  };
  if (info.st_size > max_bytes) {
    close(fd);
    return too_large();
  }
  std::string contents(static_cast<size_t>(info.st_size), '\0');
  size_t used = 0;
  while (true) {
    if (used == contents.size()) {
      // The file may have grown since fstat: read on, within the bound.
      if (static_cast<int64_t>(used) > max_bytes) break;
      contents.resize(
          std::min<size_t>(std::max<size_t>(2 * used, 4096), static_cast<size_t>(max_bytes) + 1));
    }
    const ssize_t n = read(fd, contents.data() + used, contents.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status status = ErrnoError("cannot read", path);
      close(fd);
      return status;
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  close(fd);
  if (static_cast<int64_t>(used) > max_bytes) return too_large();
  contents.resize(used);
  return contents;
}

namespace {

absl::Status WriteAll(int fd, absl::string_view piece, const std::string& path) {
  const char* data = piece.data();
  size_t left = piece.size();
  while (left > 0) {
    const ssize_t n = write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot write", path);
    data += n;
    left -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Creates the temporary file beside `path` that replaces it (CommitTemporary).
absl::StatusOr<std::pair<std::string, int>> CreateTemporary(const std::string& path) {
  std::string temp = absl::StrCat(path, ".tmp.", getpid());
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", temp);
  return std::make_pair(std::move(temp), fd);
}

// Flushes and closes `fd` (the file `temp`), renames it over `path` and flushes the folder;
// removes `temp` on failure.
absl::Status CommitTemporary(int fd, const std::string& temp, const std::string& path) {
  if (fsync(fd) != 0) {
    absl::Status status = ErrnoError("cannot flush", temp);
    close(fd);
    unlink(temp.c_str());
    return status;
  }
  if (close(fd) != 0) {
    absl::Status status = ErrnoError("cannot flush", temp);
    unlink(temp.c_str());
    return status;
  }
  if (rename(temp.c_str(), path.c_str()) != 0) {
    absl::Status status = ErrnoError("cannot rename onto", path);
    unlink(temp.c_str());
    return status;
  }
  const int dir = open(Parent(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    fsync(dir);
    close(dir);
  }
  return absl::OkStatus();
}

// WriteFileAtomically for contents given in pieces.
absl::Status WritePiecesAtomically(const std::string& path,
                                   std::initializer_list<absl::string_view> pieces) {
  LOCALSGD_ASSIGN_OR_RETURN(auto temp, CreateTemporary(path));
  for (absl::string_view piece : pieces) {
    if (absl::Status status = WriteAll(temp.second, piece, temp.first); !status.ok()) {
      close(temp.second);
      unlink(temp.first.c_str());
      return status;
    }
  }
  return CommitTemporary(temp.second, temp.first, path);
}

uint32_t Crc32(absl::string_view data, uint32_t crc = 0) {
  if (data.empty()) return crc;  // (zlib answers a null buffer with its initial value)
  return static_cast<uint32_t>(
      crc32_z(crc, reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

std::string ChecksumHeader(uint32_t crc, uint64_t length) {
  return absl::StrFormat("%s crc32=%08x length=%d\n", kChecksumHeader, crc, length);
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  return WritePiecesAtomically(path, {contents});
}

absl::Status WriteChecksummedFile(const std::string& path,
                                  std::initializer_list<absl::string_view> payload) {
  uint64_t length = 0;
  for (absl::string_view piece : payload) length += piece.size();
  LOCALSGD_ASSIGN_OR_RETURN(ChecksummedFileWriter writer,
                            ChecksummedFileWriter::Open(path, length));
  for (absl::string_view piece : payload) LOCALSGD_RETURN_IF_ERROR(writer.Append(piece));
  return writer.Commit();
}

absl::StatusOr<ChecksummedFileWriter> ChecksummedFileWriter::Open(const std::string& path,
                                                                  uint64_t length) {
  LOCALSGD_ASSIGN_OR_RETURN(auto temp, CreateTemporary(path));
  ChecksummedFileWriter writer(path, std::move(temp.first), temp.second, length);
  // The header's length does not depend on the checksum: Commit writes it over this one.
  const std::string header = ChecksumHeader(0, length);
  if (absl::Status status = WriteAll(writer.fd_, header, writer.temp_); !status.ok()) {
    return writer.Fail(status);
  }
  return writer;
}

ChecksummedFileWriter::ChecksummedFileWriter(ChecksummedFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_(std::move(other.temp_)),
      fd_(std::exchange(other.fd_, -1)),
      length_(other.length_),
      written_(other.written_),
      crc_(other.crc_) {}

ChecksummedFileWriter::~ChecksummedFileWriter() {
  if (fd_ >= 0) Fail(absl::OkStatus()).IgnoreError();
}

absl::Status ChecksummedFileWriter::Fail(absl::Status status) {
  if (fd_ >= 0) {
    close(fd_);
    unlink(temp_.c_str());
    fd_ = -1;
  }
  return status;
}

absl::Status ChecksummedFileWriter::Append(absl::string_view piece) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": the write ended"));
  if (piece.size() > length_ - written_) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat(path_, ": more than the ", length_, " bytes the payload was opened with")));
  }
  if (absl::Status status = WriteAll(fd_, piece, temp_); !status.ok()) return Fail(status);
  crc_ = Crc32(piece, crc_);
  written_ += piece.size();
  return absl::OkStatus();
}

absl::Status ChecksummedFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": the write ended"));
  if (written_ != length_) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat(path_, ": ", written_, " of the ", length_, " bytes were written")));
  }
  const std::string header = ChecksumHeader(crc_, length_);
  if (pwrite(fd_, header.data(), header.size(), 0) != static_cast<ssize_t>(header.size())) {
    return Fail(ErrnoError("cannot write", temp_));
  }
  const int fd = std::exchange(fd_, -1);
  return CommitTemporary(fd, temp_, path_);
}

absl::StatusOr<std::string> ReadChecksummedFile(const std::string& path) {
  LOCALSGD_ASSIGN_OR_RETURN(std::string contents,
                            ReadFile(path, std::numeric_limits<int64_t>::max()));
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(path, " is corrupt (", why,
                                            "); it was not used. Move it away to start afresh"));
  };
  const size_t newline = contents.find('\n');
  if (newline == std::string::npos) return corrupt("no checksum header");
  const absl::string_view header(contents.data(), newline);
  uint32_t crc = 0;
  size_t length = 0;
  if (!absl::StartsWith(header, kChecksumHeader)) return corrupt("no checksum header");
  {
    unsigned int crc_read = 0;
    unsigned long long length_read = 0;  // NOLINT(runtime/int): sscanf's type
    const std::string header_text(header);
    if (std::sscanf(header_text.c_str() + std::strlen(kChecksumHeader), " crc32=%8x length=%llu",
                    &crc_read, &length_read) != 2) {
      return corrupt("unreadable checksum header");
    }
    crc = crc_read;
    length = static_cast<size_t>(length_read);
  }
  std::string payload = contents.substr(newline + 1);
  if (payload.size() != length) {
    return corrupt(absl::StrCat(payload.size() < length ? "truncated: " : "too long: ",
                                payload.size(), " bytes where the header says ", length));
  }
  if (Crc32(payload) != crc) return corrupt("checksum mismatch");
  return payload;
}

absl::Status MakeDirectories(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("empty directory path");
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    std::string prefix = path.substr(0, i);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoError("cannot create directory", prefix);
    }
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ErrnoError("cannot stat", path);
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace localsgd
