#include "worker/node_group.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace localsgd {
namespace {

std::string AlivePath(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/alive.", rank);
}

// formed.<rank>: written by a rank once it formed its node's first group: the incarnation it
// formed in and its own mark (the contents of its alive.<rank>).
std::string FormedPath(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/formed.", rank);
}

std::string FormedMark(const std::string& incarnation, const std::string& alive) {
  return absl::StrCat(incarnation, " ", alive);
}

std::string ArrivedPath(const std::string& dir, int generation, int rank) {
  return absl::StrCat(dir, "/g", generation, ".rank", rank);
}

// True while the process that locked alive.<rank> lives (its lock cannot be taken).
bool Alive(const std::string& dir, int rank) {
  const int fd = open(AlivePath(dir, rank).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);  // drops the lock if this probe took it
  return held;
}

// Polls `ready` every 20 ms until it holds. CANCELLED once `give_up()` (when given) says so,
// DEADLINE_EXCEEDED after `timeout`; both name `waiting_for()`, the ranks not there yet.
absl::Status WaitForRanks(const std::function<bool()>& ready, absl::Duration timeout,
                          const std::function<bool()>& give_up,
                          const std::function<std::string()>& waiting_for,
                          absl::string_view detail = "") {
  const absl::Time give_up_at = absl::Now() + timeout;
  while (!ready()) {
    if (give_up != nullptr && give_up()) {
      return absl::CancelledError(absl::StrCat("stopped waiting for ", waiting_for()));
    }
    if (absl::Now() > give_up_at) {
      return absl::DeadlineExceededError(absl::StrCat(waiting_for(), " did not start within ",
                                                      absl::FormatDuration(timeout), detail));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

// The file's contents ("" when it cannot be read).
std::string ReadSmallFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFile(path, 4096);  // a mark: a few numbers
  return contents.ok() ? *contents : "";
}

// The names of the entries in `dir`, "." and ".." left out.
absl::StatusOr<std::vector<std::string>> ListFolder(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot list ", dir, ": ", strerror(errno)));
  }
  std::vector<std::string> names;
  while (dirent* entry = readdir(d)) {
    const absl::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  closedir(d);
  return names;
}

// Removes g<generation>.* (stores and arrival marks).
absl::Status RemoveGenerationFiles(const std::string& dir) {
  LOCALSGD_ASSIGN_OR_RETURN(std::vector<std::string> names, ListFolder(dir));
  for (const std::string& name : names) {
    if (name.size() > 1 && name[0] == 'g' && absl::ascii_isdigit(name[1])) {
      unlink(absl::StrCat(dir, "/", name).c_str());
    }
  }
  return absl::OkStatus();
}

// Removes `dir` and its files, unless some rank still holds its alive.<rank> there (or the
// folder cannot be listed).
void RemoveFolderUnlessInUse(const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> names = ListFolder(dir);
  if (!names.ok()) return;
  for (const std::string& name : *names) {
    int rank = 0;
    if (absl::StartsWith(name, "alive.") &&
        absl::SimpleAtoi(absl::string_view(name).substr(6), &rank) && Alive(dir, rank)) {
      return;
    }
  }
  for (const std::string& name : *names) unlink(absl::StrCat(dir, "/", name).c_str());
  rmdir(dir.c_str());
}

// Opens the folder `dir` and takes its lock; -1 (errno says why) when there is no folder. The
// lock is on the folder that `dir` names once it is held: one removed (and perhaps made again
// by a joining rank) while this waited is let go, and the folder there now is locked instead. A
// lock on a removed folder would let a remover list the new one while a rank joins it.
int LockFolder(const std::string& dir) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat locked;
    struct stat named;
    if (flock(fd, LOCK_EX) == 0 && fstat(fd, &locked) == 0 && stat(dir.c_str(), &named) == 0 &&
        locked.st_dev == named.st_dev && locked.st_ino == named.st_ino) {
      return fd;
    }
    close(fd);
  }
  return -1;
}

// Opens alive.<rank> in `dir`, takes its lock and writes `mark` (this process's) into it,
// holding the folder's lock meanwhile: a rank removing an unused folder holds that lock too, so
// it never removes a folder that a rank is joining, and a rank reading who runs under it never
// sees a live rank with an earlier process's mark. The folder may be removed just before this
// rank gets its lock: it is made again.
absl::StatusOr<int> HoldAliveLock(const std::string& dir, int local_rank, const std::string& mark) {
  const std::string lock_path = AlivePath(dir, local_rank);
  const absl::Time give_up_at = absl::Now() + absl::Seconds(5);
  while (true) {
    if (absl::Status made = MakeDirectories(dir); !made.ok()) {
      if (absl::IsNotFound(made) && absl::Now() < give_up_at) continue;  // removed meanwhile
      return made;
    }
    const int dir_fd = LockFolder(dir);
    if (dir_fd < 0) {
      const int lock_errno = errno;
      if (lock_errno == ENOENT && absl::Now() < give_up_at) continue;  // removed meanwhile
      return absl::UnavailableError(
          absl::StrCat("cannot lock the folder ", dir, ": ", strerror(lock_errno)));
    }
    const int fd = openat(dir_fd, absl::StrCat("alive.", local_rank).c_str(),
                          O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      const int open_errno = errno;
      close(dir_fd);
      return absl::UnavailableError(
          absl::StrCat("cannot open ", lock_path, ": ", strerror(open_errno)));
    }
    // Another rank's liveness probe holds the lock for microseconds: retry for a while.
    const absl::Time lock_until = absl::Now() + absl::Seconds(1);
    bool locked = true;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (absl::Now() > lock_until) {
        locked = false;
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    const bool written = locked && ftruncate(fd, 0) == 0 &&
                         pwrite(fd, mark.data(), mark.size(), 0) == ssize_t(mark.size());
    const int write_errno = errno;
    close(dir_fd);  // drops the folder's lock
    if (!locked) {
      close(fd);
      return absl::AlreadyExistsError(absl::StrCat("local rank ", local_rank,
                                                   " already runs on this node (", lock_path,
                                                   " is locked by a live process)"));
    }
    if (!written) {
      close(fd);
      return absl::UnavailableError(
          absl::StrCat("cannot write ", lock_path, ": ", strerror(write_errno)));
    }
    return fd;
  }
}

// When this rank formed a group in `incarnation` before (it was started again) and other ranks
// of that incarnation still live, those ranks: they train on in a group without it.
std::vector<int> RunningWithout(const std::string& dir, int local_rank, int local_world,
                                const std::string& incarnation) {
  std::vector<int> running;
  // (A live process of this very rank is refused below as ALREADY_EXISTS.)
  if (incarnation.empty() || Alive(dir, local_rank) ||
      !absl::StartsWith(ReadSmallFile(FormedPath(dir, local_rank)), FormedMark(incarnation, ""))) {
    return running;
  }
  for (int r = 0; r < local_world; ++r) {
    if (r != local_rank && Alive(dir, r) &&
        ReadSmallFile(FormedPath(dir, r)) ==
            FormedMark(incarnation, ReadSmallFile(AlivePath(dir, r)))) {
      running.push_back(r);
    }
  }
  return running;
}

}  // namespace

NodeGroup::NodeGroup(std::string dir, int local_rank, int lock_fd, absl::Duration timeout,
                     Factory factory)
    : dir_(std::move(dir)),
      local_rank_(local_rank),
      lock_fd_(lock_fd),
      timeout_(timeout),
      factory_(std::move(factory)) {}

NodeGroup::~NodeGroup() {
  averager_.reset();
  if (!remove_folder_) {
    close(lock_fd_);
    return;
  }
  // This rank's liveness lock goes inside its turn, so the last of the ranks leaving together
  // finds none held.
  const int dir_fd = LockFolder(dir_);
  close(lock_fd_);
  if (dir_fd >= 0) {
    RemoveFolderUnlessInUse(dir_);
    close(dir_fd);
  }
}

void NodeGroup::RemoveFolderIfUnused(const std::string& dir) {
  // Nothing when the folder is gone: without its lock, this could list a folder that a rank
  // is just making, before that rank holds its liveness lock there.
  const int fd = LockFolder(dir);
  if (fd < 0) return;
  RemoveFolderUnlessInUse(dir);
  close(fd);  // drops the lock
}

void NodeGroup::RemoveUnusedFolders(const std::string& parent, absl::string_view prefix,
                                    absl::string_view suffix, absl::string_view keep) {
  absl::StatusOr<std::vector<std::string>> names = ListFolder(parent);
  if (!names.ok()) return;
  for (const std::string& name : *names) {
    if (name == keep || name.size() < prefix.size() + suffix.size() ||
        !absl::StartsWith(name, prefix) || !absl::EndsWith(name, suffix)) {
      continue;
    }
    // Only a node folder: one where some rank once held its liveness lock.
    const std::string dir = absl::StrCat(parent, "/", name);
    absl::StatusOr<std::vector<std::string>> entries = ListFolder(dir);
    if (entries.ok() && std::any_of(entries->begin(), entries->end(), [](const std::string& e) {
          return absl::StartsWith(e, "alive.");
        })) {
      RemoveFolderIfUnused(dir);
    }
  }
}

absl::StatusOr<std::unique_ptr<NodeGroup>> NodeGroup::Form(const std::string& dir, int local_rank,
                                                           int local_world, absl::Duration timeout,
                                                           Factory factory,
                                                           std::function<bool()> give_up) {
  const std::string incarnation = absl::StrCat(dir, "/incarnation");
  // A rank started again while others of its node train on in a group without it cannot join
  // that group (groups only shrink): it says so instead of breaking the group's files. Under
  // the folder's lock: a rank of a new start holding its liveness lock has its own mark there.
  std::vector<int> running;
  if (const int dir_fd = LockFolder(dir); dir_fd >= 0) {
    running = RunningWithout(dir, local_rank, local_world, ReadSmallFile(incarnation));
    close(dir_fd);
  }
  if (!running.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("local rank(s) ", absl::StrJoin(running, ", "),
                     " of this node train on in a group "
                     "without local rank ",
                     local_rank,
                     "; a rank cannot rejoin a running node group: "
                     "restart all of the node's ranks together"));
  }
  // Before rank 0 holds its lock, no incarnation file may name a live rank 0 (see below).
  if (local_rank == 0) unlink(incarnation.c_str());
  // This process's mark in alive.<rank>: unique per start (threads of one process too).
  const std::string pid = absl::StrCat(getpid(), "-", absl::ToUnixNanos(absl::Now()));
  LOCALSGD_ASSIGN_OR_RETURN(const int fd, HoldAliveLock(dir, local_rank, pid));
  std::unique_ptr<NodeGroup> group(new NodeGroup(dir, local_rank, fd, timeout, std::move(factory)));
  // Files of an earlier incarnation of this node's ranks (all killed, then restarted) must not
  // be read: rank 0 removes them, then names itself in `incarnation`; the other ranks go on
  // once that names the live rank 0.
  std::string named = pid;  // the incarnation this rank forms in
  if (local_rank == 0) {
    LOCALSGD_RETURN_IF_ERROR(RemoveGenerationFiles(dir));
    LOCALSGD_RETURN_IF_ERROR(WriteFileAtomically(incarnation, pid));
  } else {
    LOCALSGD_RETURN_IF_ERROR(WaitForRanks(
        [&] {
          named = ReadSmallFile(incarnation);
          return !named.empty() && Alive(dir, 0) && ReadSmallFile(AlivePath(dir, 0)) == named;
        },
        timeout, give_up, [] { return std::string("local rank 0 of this node"); },
        absl::StrCat(" (no live rank 0 named in ", incarnation, ")")));
  }
  // The collectives' rendezvous cannot be interrupted: every rank waits here, where it can,
  // until the whole node is up. (A rank still outside when the run ended, e.g. one that joined
  // the coordinator only after the stop, would otherwise hold the others in the rendezvous for
  // the whole timeout, and an operator's stop would not end them.)
  std::vector<int> missing;
  LOCALSGD_RETURN_IF_ERROR(WaitForRanks(
      [&] {
        missing.clear();
        for (int r = 0; r < local_world; ++r) {
          if (r != local_rank && !Alive(dir, r)) missing.push_back(r);
        }
        return missing.empty();
      },
      timeout, give_up,
      [&] {
        return absl::StrCat("local rank(s) ", absl::StrJoin(missing, ", "), " of this node");
      }));
  for (int r = 0; r < local_world; ++r) group->members_.push_back(r);
  LOCALSGD_RETURN_IF_ERROR(group->FormGeneration());
  if (absl::Status s = WriteFileAtomically(FormedPath(dir, local_rank), FormedMark(named, pid));
      !s.ok()) {
    return s;
  }
  return group;
}

absl::Status NodeGroup::FormGeneration() {
  int rank = 0;
  while (members_[rank] != local_rank_) ++rank;
  const int size = static_cast<int>(members_.size());
  if (size == 1) {
    averager_ = MakeSingleRankAverager();
    return absl::OkStatus();
  }
  LOCALSGD_ASSIGN_OR_RETURN(std::unique_ptr<IntraNodeAverager> made,
                            factory_(absl::StrCat(dir_, "/g", generation_, ".store"), rank, size,
                                     [this] { return PeersAlive(); }));
  averager_ = std::move(made);
  return absl::OkStatus();
}

bool NodeGroup::PeersAlive() const {
  for (int r : members_) {
    if (r != local_rank_ && !Alive(dir_, r)) return false;
  }
  return true;
}

absl::Status NodeGroup::Reform() {
  averager_.reset();  // closes this rank's connections: peers still waiting on it fail now
  ++generation_;
  const std::string arrived = ArrivedPath(dir_, generation_, local_rank_);
  const int fd = open(arrived.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot create ", arrived, ": ", strerror(errno)));
  }
  close(fd);
  const absl::Time give_up = absl::Now() + timeout_;
  std::vector<int> came, dead, waiting;
  while (true) {
    came.clear();
    dead.clear();
    waiting.clear();
    for (int r : members_) {
      if (r == local_rank_ || access(ArrivedPath(dir_, generation_, r).c_str(), F_OK) == 0) {
        came.push_back(r);
      } else if (Alive(dir_, r)) {
        waiting.push_back(r);
      } else {
        dead.push_back(r);
      }
    }
    if (waiting.empty()) break;
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("re-forming the node's group (generation ", generation_, "): local rank(s) ",
                       absl::StrJoin(waiting, ", "), " neither came nor died within ",
                       absl::FormatDuration(timeout_)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  LogWarning(absl::StrCat("node group generation ", generation_, ": local rank(s) ",
                          dead.empty() ? "none" : absl::StrJoin(dead, ", "),
                          " gone; going on with local ranks ", absl::StrJoin(came, ", ")));
  members_ = std::move(came);
  return FormGeneration();
}

}  // namespace localsgd
