#ifndef LOCALSGD_EXCHANGE_MEMBER_ROUND_H_
#define LOCALSGD_EXCHANGE_MEMBER_ROUND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "exchange/chunking.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// One member's view of a sharded round (docs/design.md, "Sharded rounds"), with no network:
// the coordinator's layout checked against the member's vector, which ranges it owns, the
// averaged chunks already here, and the verdict once the round is over. Thread-compatible: the
// caller serialises Expect and Mark.
class MemberRound {
 public:
  // The round `header` announces, for member `member_id` whose vector has `vector_length`
  // values. INTERNAL when the layout does not fit: not a sharded round, chunks that do not
  // match the vector, ranges that do not tile it, a layout that does not list the member, a
  // range or a ring for a member without a data plane (`has_data_plane`), or a ring that does
  // not give each member one fp32 range in slot order.
  static absl::StatusOr<std::unique_ptr<MemberRound>> Open(const v1::RoundHeader& header,
                                                           const std::string& member_id,
                                                           int64_t vector_length,
                                                           bool has_data_plane);

  const v1::RoundHeader& header() const { return header_; }
  const ChunkLayout& layout() const { return layout_; }
  int self() const { return self_; }  // this member's slot
  bool ring() const { return header_.ring(); }
  int num_ranges() const { return header_.shards_size(); }
  const v1::ShardRange& range(int s) const { return header_.shards(s); }
  // This member owns range `s` in its ShardOwner (never in a ring: its sums end here).
  bool owns(int s) const;
  // The range chunk `c` lies in; -1 when `c` is outside the vector.
  int RangeOf(int c) const;

  // OK when averaged chunk `c` of range `s` may come now: inside the range and not here yet.
  absl::Status Expect(int s, int c) const;
  // Averaged chunk `c` of range `s` (Expect said OK) is here; true when it was the last one.
  bool Mark(int s, int c);
  bool complete() const { return received_ == layout_.num_chunks(); }
  // OK when every chunk of range `s` is here; else the error names its owner.
  absl::Status RangeComplete(int s) const;

  // The outcome of the round for this member: `committed` when the coordinator sent the
  // commit, `coordinator` the Sync stream's status, `own_problem` the first failure of this
  // member's exchanges (an owner or a neighbour), OK if none. OK means apply the
  // update; ABORTED means keep the local weights and sync at the next boundary.
  absl::Status Verdict(bool committed, const absl::Status& coordinator,
                       const absl::Status& own_problem) const;

 private:
  MemberRound(const v1::RoundHeader& header, ChunkLayout layout, int self);

  const v1::RoundHeader header_;
  const ChunkLayout layout_;
  const int self_;
  std::vector<int> range_of_chunk_;
  std::vector<bool> here_;    // by chunk
  std::vector<int> missing_;  // by range: chunks not here yet
  int received_ = 0;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_MEMBER_ROUND_H_
