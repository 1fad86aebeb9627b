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

// WriteFileAtomically for contents given in pieces: `first`, then `rest`.
absl::Status WritePiecesAtomically(const std::string& path, absl::string_view first,
                                   std::initializer_list<absl::string_view> rest = {}) {
  std::string temp = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", temp);
  std::vector<absl::string_view> pieces = {first};
  pieces.insert(pieces.end(), rest.begin(), rest.end());
  for (absl::string_view piece : pieces) {
    const char* data = piece.data();
    size_t left = piece.size();
    while (left > 0) {
      ssize_t n = write(fd, data, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        absl::Status status = ErrnoError("cannot write", temp);
        close(fd);
        unlink(temp.c_str());
        return status;
      }
      data += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    absl::Status status = ErrnoError("cannot flush", temp);
    unlink(temp.c_str());
    return status;
  }
  if (rename(temp.c_str(), path.c_str()) != 0) {
    absl::Status status = ErrnoError("cannot rename onto", path);
    unlink(temp.c_str());
    return status;
  }
  int dir = open(Parent(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    fsync(dir);
    close(dir);
  }
  return absl::OkStatus();
}

uint32_t Crc32(absl::string_view data, uint32_t crc = 0) {
  if (data.empty()) return crc;  // (zlib answers a null buffer with its initial value)
  return static_cast<uint32_t>(
      crc32_z(crc, reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  return WritePiecesAtomically(path, contents);
}

absl::Status WriteChecksummedFile(const std::string& path,
                                  std::initializer_list<absl::string_view> payload) {
  uint32_t crc = 0;
  size_t length = 0;
  for (absl::string_view piece : payload) {
    crc = Crc32(piece, crc);
    length += piece.size();
  }
  const std::string header =
      absl::StrFormat("%s crc32=%08x length=%d\n", kChecksumHeader, crc, length);
  return WritePiecesAtomically(path, header, payload);
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
