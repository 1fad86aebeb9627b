#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

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

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("cannot open", path);
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return ErrnoError("cannot read", path);
  return contents.str();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  std::string temp = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", temp);
  const char* data = contents.data();
  size_t left = contents.size();
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
