#include "exchange/member_round.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace localsgd {
namespace {

absl::Status CheckLayout(const v1::RoundHeader& header, const std::string& member_id,
                         const ChunkLayout& layout) {
  if (header.exchange() != v1::EXCHANGE_SHARDED) {
    return absl::InternalError(
        "the coordinator answered with a star round (the run's exchange "
        "is EXCHANGE_STAR)");
  }
  if (header.chunk_values() <= 0 || layout.num_chunks() != header.num_chunks() ||
      header.weights_size() != header.members_size() || header.shards_size() == 0 ||
      header.first_chunk() < 0) {
    return absl::InternalError("the round's layout does not match the vector");
  }
  if (std::find(header.members().begin(), header.members().end(), member_id) ==
      header.members().end()) {
    return absl::InternalError("the round's layout does not list this member");
  }
  int next = 0;
  for (const v1::ShardRange& shard : header.shards()) {
    if (shard.begin_chunk() != next || shard.end_chunk() <= shard.begin_chunk()) {
      return absl::InternalError("the round's shards do not tile the vector");
    }
    next = shard.end_chunk();
  }
  if (next != layout.num_chunks()) {
    return absl::InternalError("the round's shards do not tile the vector");
  }
  return absl::OkStatus();
}

// A ring layout: member i owns range i.
absl::Status CheckRing(const v1::RoundHeader& header) {
  const int n = header.members_size();
  if (n < 2 || header.shards_size() != n) {
    return absl::InternalError("the ring's layout does not give each member one range");
  }
  for (int i = 0; i < n; ++i) {
    if (header.shards(i).owner_id() != header.members(i)) {
      return absl::InternalError("the ring's ranges are not the members' in slot order");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MemberRound>> MemberRound::Open(const v1::RoundHeader& header,
                                                               const std::string& member_id,
                                                               int64_t vector_length,
                                                               bool has_data_plane) {
  const ChunkLayout layout{vector_length, header.chunk_values()};
  if (absl::Status s = CheckLayout(header, member_id, layout); !s.ok()) return s;
  if (header.ring()) {
    if (!has_data_plane) {
      return absl::InternalError("the layout puts a member without a data plane in a ring");
    }
    if (absl::Status s = CheckRing(header); !s.ok()) return s;
  }
  const int self =
      static_cast<int>(std::find(header.members().begin(), header.members().end(), member_id) -
                       header.members().begin());
  std::unique_ptr<MemberRound> round(new MemberRound(header, layout, self));
  for (int s = 0; s < round->num_ranges(); ++s) {
    if (round->owns(s) && !has_data_plane) {
      return absl::InternalError("the layout gives a range to a member without a data plane");
    }
  }
  return round;
}

MemberRound::MemberRound(const v1::RoundHeader& header, ChunkLayout layout, int self)
    : header_(header), layout_(layout), self_(self) {
  range_of_chunk_.resize(static_cast<size_t>(layout_.num_chunks()));
  here_.assign(static_cast<size_t>(layout_.num_chunks()), false);
  for (int s = 0; s < header_.shards_size(); ++s) {
    const v1::ShardRange& shard = header_.shards(s);
    std::fill(range_of_chunk_.begin() + shard.begin_chunk(),
              range_of_chunk_.begin() + shard.end_chunk(), s);
    missing_.push_back(shard.end_chunk() - shard.begin_chunk());
  }
}

bool MemberRound::owns(int s) const {
  return !ring() && range(s).owner_id() == header_.members(self_);
}

int MemberRound::RangeOf(int c) const {
  return c >= 0 && c < layout_.num_chunks() ? range_of_chunk_[c] : -1;
}

absl::Status MemberRound::Expect(int s, int c) const {
  if (RangeOf(c) != s || here_[c]) {
    return absl::InternalError(
        absl::StrCat("owner ", range(s).owner_id(), " sent an unexpected chunk ", c));
  }
  return absl::OkStatus();
}

bool MemberRound::Mark(int s, int c) {
  here_[c] = true;
  --missing_[s];
  return ++received_ == layout_.num_chunks();
}

absl::Status MemberRound::RangeComplete(int s) const {
  if (missing_[s] == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("owner ", range(s).owner_id(), " ended its stream before its whole range"));
}

absl::Status MemberRound::Verdict(bool committed, const absl::Status& coordinator,
                                  const absl::Status& own_problem) const {
  if (!committed) {
    // The coordinator's verdict first (ABORTED: an owner died, ...); when this member left the
    // round itself because an owner failed it, the round is over for it all the same.
    if (!coordinator.ok() && !absl::IsCancelled(coordinator)) return coordinator;
    if (!own_problem.ok()) {
      return absl::AbortedError(absl::StrCat("round ", header_.round(),
                                             " aborted for this member: ", own_problem.message()));
    }
    return coordinator.ok() ? absl::InternalError("the round ended without a commit") : coordinator;
  }
  if (!complete()) {
    // The coordinator committed without this member (it was dropped): it adopts the model.
    return absl::AbortedError("the round committed without this member's whole update");
  }
  return absl::OkStatus();
}

}  // namespace localsgd
