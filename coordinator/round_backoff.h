#ifndef LOCALSGD_COORDINATOR_ROUND_BACKOFF_H_
#define LOCALSGD_COORDINATOR_ROUND_BACKOFF_H_

#include <optional>
#include <string>

#include "absl/time/time.h"

namespace localsgd {

// Whether a new round may open after rounds that aborted (docs/design.md, "Faults"): rounds
// that cannot commit (too few members for min_workers, say) would otherwise open and abort at
// every member's step boundary. After `free_aborts` aborts in a row, the next round opens no
// sooner than `first` after the last abort, doubling with each further abort up to `longest`;
// a commit ends the back-off, and so does a change in the live members (`membership`: any
// string that differs when they do), since the rounds may commit with the new ones. A pure
// decision over the calls and a clock the caller passes in. Thread-compatible.
class RoundBackoff {
 public:
  struct Options {
    int free_aborts = 3;
    absl::Duration first = absl::Seconds(1);
    absl::Duration longest = absl::Seconds(30);
  };

  RoundBackoff() : RoundBackoff(Options()) {}
  explicit RoundBackoff(Options options) : options_(options) {}

  // A round aborted at `now` for `reason`, with `membership` live. Returns why rounds wait
  // when this abort starts a back-off (as MayOpen says it), else nullopt.
  std::optional<std::string> Aborted(absl::Time now, const std::string& membership,
                                     const std::string& reason);
  // A round committed.
  void Committed() { aborts_ = 0; }
  // Whether a round may open at `now` with `membership` live; when not, `*why` says until when
  // and why (when not null).
  bool MayOpen(absl::Time now, const std::string& membership, std::string* why = nullptr) const;
  // Aborts in a row since the last commit.
  int aborts() const { return aborts_; }

 private:
  Options options_;
  int aborts_ = 0;
  absl::Time until_ = absl::InfinitePast();
  std::string membership_;  // at the last abort
  std::string reason_;      // of the last abort
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_ROUND_BACKOFF_H_
