#ifndef LOCALSGD_COORDINATOR_FAKE_ROUND_CONTEXT_H_
#define LOCALSGD_COORDINATOR_FAKE_ROUND_CONTEXT_H_

// Test doubles for the round drivers (StarDriver, ShardedDriver): a member's stream and the
// round manager's side of a round.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/round_driver.h"
#include "coordinator/round_sessions.h"

namespace localsgd {

// Keeps what the driver sends it.
class FakeStream : public RoundMember {
 public:
  void Enqueue(std::shared_ptr<const v1::SyncResponse> message) override {
    sent.push_back(*message);
  }
  void Close(const absl::Status& status) override { closed = status; }
  void Flush() override {}
  void Cancel() override {}

  std::vector<v1::SyncResponse> sent;
  std::optional<absl::Status> closed;
};

// Round 4 (global step 12 committed) of 4096 values in chunks of 256; records the commit or
// the abort.
class FakeRoundContext : public RoundContext {
 public:
  FakeRoundContext() {
    spec_.set_min_workers(2);
    spec_.set_round_deadline_seconds(5);
    spec_.set_local_sgd_steps(4);
    round_.number = 4;
    round_.opened = now_;
    round_.layout = ChunkLayout{4096, 256};
  }
  absl::Time Now() const override { return now_; }
  const std::string& run_id() const override { return run_id_; }
  const v1::RunSpec& spec() const override { return spec_; }
  int64_t committed_round() const override { return 3; }
  int64_t committed_step() const override { return 12; }
  const Round& round() const override { return round_; }
  uint64_t NextAttempt() override { return ++attempts_; }
  RoundSessions& sessions() override { return sessions_; }
  void CountBytes(int64_t, int64_t) override {}
  bool MayCommit() const override { return true; }
  void Commit(const std::vector<std::string>& included, int64_t step, DigestPair digest,
              std::string) override {
    committed = included;
    committed_at = step;
    committed_digest = digest;
  }
  void Abort(const std::string& reason) override { aborted = reason; }
  // What a star round averages on (RoundContext::Round::reducer).
  void set_reducer(std::shared_ptr<RangeReducer> reducer) { round_.reducer = std::move(reducer); }

  std::vector<std::string> committed;
  int64_t committed_at = -1;
  DigestPair committed_digest;
  std::string aborted;

 private:
  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::string run_id_ = "run-1";
  v1::RunSpec spec_;
  Round round_;
  uint64_t attempts_ = 0;
  RoundSessions sessions_;
};

// Member `member_id`'s header for FakeRoundContext's round: round 4, step 16, weight 1.
inline v1::SyncHeader HeaderOf(const std::string& member_id) {
  v1::SyncHeader header;
  header.set_run_id("run-1");
  header.set_round(4);
  header.set_member_id(member_id);
  header.set_weight(1);
  header.set_num_workers(1);
  header.set_step(16);
  return header;
}

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_FAKE_ROUND_CONTEXT_H_
