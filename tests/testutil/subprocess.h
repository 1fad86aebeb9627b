#ifndef LOCALSGD_TESTS_TESTUTIL_SUBPROCESS_H_
#define LOCALSGD_TESTS_TESTUTIL_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace localsgd::testing {

// A child process whose stdout and stderr are read through one pipe, for multi-process
// tests: start a binary, wait for a line it prints, signal it, collect its exit status.
// The destructor SIGKILLs a child still running. Thread-compatible.
class Subprocess {
 public:
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const std::vector<std::string>& argv);
  ~Subprocess();

  // Reads output until a line starting with `prefix` appears; returns that line without the
  // prefix. DEADLINE_EXCEEDED or FAILED_PRECONDITION (the child exited) otherwise.
  absl::StatusOr<std::string> WaitForLine(absl::string_view prefix, absl::Duration timeout);

  // Sends `signal` to the child.
  void Signal(int signal);

  // Waits for the child to exit, reading the rest of its output; returns the exit code, or
  // 128 + signal number when a signal ended it. SIGKILLs it after `timeout`.
  int Wait(absl::Duration timeout);

  // Everything the child has printed so far.
  const std::string& output() const { return output_; }
  pid_t pid() const { return pid_; }

 private:
  Subprocess(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  // Reads what is available within `timeout`; false at end of output.
  bool ReadSome(absl::Duration timeout);

  pid_t pid_;
  int fd_;
  std::string output_;
  size_t scanned_ = 0;  // output_ before this offset has been searched for lines
  bool exited_ = false;
  int exit_code_ = -1;
};

// The path of a binary built by Bazel, from its label-relative path ("coordinator/coordinator").
std::string RunfilePath(const std::string& relative);

}  // namespace localsgd::testing

#endif  // LOCALSGD_TESTS_TESTUTIL_SUBPROCESS_H_
