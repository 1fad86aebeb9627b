#ifndef LOCALSGD_COORDINATOR_STAR_DRIVER_H_
#define LOCALSGD_COORDINATOR_STAR_DRIVER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/control_plane.h"
#include "coordinator/round_driver.h"
#include "coordinator/star_round.h"
#include "exchange/range_reducer.h"

namespace localsgd {

// Star rounds on the coordinator (docs/design.md, "Star rounds"): a StarRound decides, the
// round's range reducer averages every member's delta here, and each update chunk goes to
// every member as soon as it is averaged. Thread-compatible: the round manager's lock.
class StarDriver : public RoundDriver {
 public:
  // The round `context` opened, expecting `leaders`.
  StarDriver(RoundContext* context, const std::vector<ControlPlane::Leader>& leaders);

  absl::StatusOr<int64_t> Arrive(const v1::SyncHeader& header,
                                 std::shared_ptr<RoundMember> stream) override;
  void Refuse(const std::string& member_id, const std::string& reason, bool excused) override;
  void Leave(int64_t session, const absl::Status& why) override;
  void EndOfInput(int64_t session) override;
  void Tick(absl::Time now, const std::vector<ControlPlane::Leader>& leaders) override;
  void Advance() override;
  void OnAbort() override;
  void Record(v1::RoundRecord* record) const override;
  std::vector<RoundFault> Faults() const override;

  // A member's delta chunk, checked (and decoded into `decoded`) against the round's reducer
  // outside the lock with the result `checked`: adds it, or drops the member with the error,
  // which is returned.
  absl::Status AddChunk(int64_t session, const v1::Chunk& chunk, absl::Status checked,
                        const std::vector<float>& decoded);

 private:
  // The slot's member leaves the round, then ApplyDrops.
  void Drop(int slot, const std::string& reason, const absl::Status& status);
  // The reducer stops waiting for the members the round dropped, and their streams end.
  void ApplyDrops();
  // An averaged update chunk, encoded once, to every member.
  void Send(int chunk);

  RoundContext* const context_;
  RangeReducer& reducer_;
  StarRound round_;
  std::vector<int64_t> session_of_slot_;  // -1: not joined
  std::map<int64_t, int> slot_of_session_;
  std::vector<int> chunks_received_;  // by slot
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_STAR_DRIVER_H_
