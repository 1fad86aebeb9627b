#ifndef LOCALSGD_COORDINATOR_SHARDED_DRIVER_H_
#define LOCALSGD_COORDINATOR_SHARDED_DRIVER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/control_plane.h"
#include "coordinator/round_driver.h"
#include "coordinator/sharded_round.h"
#include "exchange/model_digest.h"

namespace localsgd {

// Sharded rounds on the coordinator (docs/design.md, "Sharded rounds"): a ShardedRound
// decides; this driver sends the layout (with each member's stream tags), the drop notices and
// the commit, and takes the members' deliveries (the digests of their next copies) and reports.
// No model bytes pass through it either way: the owners send the means to every member.
// Thread-compatible: the round manager's lock.
class ShardedDriver : public RoundDriver {
 public:
  // The round `context` opened, expecting `leaders`.
  ShardedDriver(RoundContext* context, const std::vector<ControlPlane::Leader>& leaders);

  absl::StatusOr<int64_t> Arrive(const v1::SyncHeader& header,
                                 std::shared_ptr<RoundMember> stream) override;
  void Refuse(const std::string& member_id, const std::string& reason, bool excused) override;
  void Leave(int64_t session, const absl::Status& why) override;
  void EndOfInput(int64_t session) override;
  void Tick(absl::Time now, const std::vector<ControlPlane::Leader>& leaders) override;
  void Advance() override;
  void Record(v1::RoundRecord* record) const override;
  std::vector<RoundFault> Faults() const override;

  // A member's "I hold every chunk" with the digests of its next copy, and its report of an
  // owner it could not exchange with. Bad input drops the member and its stream with the error,
  // which is returned.
  absl::Status Deliver(int64_t session, const v1::Delivered& delivered);
  absl::Status Unreachable(int64_t session, const v1::OwnerUnreachable& unreachable);

 private:
  // The session's member leaves the round (stream ended, bad input); its stream is closed
  // with `status`.
  void DropSession(int64_t session, const absl::Status& status);
  // Ends the dropped members' streams and, once laid out, tells the others (owners stop
  // waiting for their deltas). Drops before the layout need no notice: it leaves them out.
  void SendDrops();
  // The members whose copies differ fetch the committed model: a StaleRound, then the end of
  // their streams (FAILED_PRECONDITION), before the others' end ABORTED.
  void SendDiverged();
  // The RoundHeader with the layout, to every member.
  void SendLayout();
  // By position in the members, the tag of each stream member `slot` opens, made under the
  // receiver's key (empty where it opens none): in a ring, its Pass stream to its successor;
  // otherwise a Reduce stream to every other owner.
  void AddStreamTags(int slot, v1::RoundHeader* header) const;

  RoundContext* const context_;
  ShardedRound round_;
  // By member: its data-plane key as of the round's opening (ControlPlane::Leader).
  std::map<std::string, std::string> data_plane_keys_;
  const std::vector<std::string> expected_;  // the leaders live when the round opened
  const uint64_t attempt_;
  bool laid_out_ = false;        // the RoundHeader went out
  std::set<int64_t> delivered_;  // sessions
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_SHARDED_DRIVER_H_
