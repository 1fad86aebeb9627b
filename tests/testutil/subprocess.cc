#include "tests/testutil/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace localsgd::testing {

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    // Restore default signal handling for the child.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(pipe_fds[1]);
  return std::unique_ptr<Subprocess>(new Subprocess(pid, pipe_fds[0]));
}

Subprocess::~Subprocess() {
  if (!exited_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  close(fd_);
}

bool Subprocess::ReadSome(absl::Duration timeout) {
  pollfd p{fd_, POLLIN, 0};
  int ready = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  if (ready <= 0) return true;
  char buffer[4096];
  ssize_t n = read(fd_, buffer, sizeof(buffer));
  if (n <= 0) return n < 0 && errno == EINTR;
  output_.append(buffer, static_cast<size_t>(n));
  return true;
}

absl::StatusOr<std::string> Subprocess::WaitForLine(absl::string_view prefix,
                                                    absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    size_t start = scanned_;
    while (true) {
      size_t end = output_.find('\n', start);
      if (end == std::string::npos) break;
      absl::string_view line(output_.data() + start, end - start);
      start = end + 1;
      scanned_ = start;
      if (absl::StartsWith(line, prefix)) return std::string(line.substr(prefix.size()));
    }
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("no line starting with \"", prefix, "\"; output:\n", output_));
    }
    if (!ReadSome(std::min(left, absl::Milliseconds(100)))) {
      return absl::FailedPreconditionError(absl::StrCat(
          "process ended before a line starting with \"", prefix, "\"; output:\n", output_));
    }
  }
}

void Subprocess::Signal(int signal) {
  if (!exited_) kill(pid_, signal);
}

int Subprocess::Wait(absl::Duration timeout) {
  if (exited_) return exit_code_;
  absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (true) {
    pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) break;
    if (absl::Now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    ReadSome(absl::Milliseconds(20));
  }
  // The rest of the output: whatever is buffered, up to end of file.
  while (output_.size() < (64u << 20)) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0 || !ReadSome(absl::ZeroDuration())) break;
  }
  exited_ = true;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit_code_;
}

std::string RunfilePath(const std::string& relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) return relative;
  return absl::StrCat(srcdir, "/", workspace, "/", relative);
}

}  // namespace localsgd::testing
