#include "exchange/shard_owner.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/log.h"
#include "common/status_util.h"
#include "exchange/codec.h"

namespace localsgd {

absl::Status ShardOwner::Install(Assignment assignment, OwnerFailureSink* sink) {
  const ChunkLayout& layout = assignment.layout;
  if (assignment.begin_chunk < 0 || assignment.begin_chunk >= assignment.end_chunk ||
      assignment.end_chunk > layout.num_chunks() || assignment.members.empty() ||
      assignment.members.size() != assignment.weights.size()) {
    return absl::InvalidArgumentError("shard assignment: bad range or members");
  }
  {
    MutexLock lock(&mu_);
    if (round_.has_value()) {
      // The previous round was not finished (its end was missed): it is over now.
      const Assignment old = round_->assignment;
      FinishLocked(old.run_id, old.round, old.attempt);
    }
    const int64_t begin = layout.begin(assignment.begin_chunk);
    const int64_t values = layout.end(assignment.end_chunk - 1) - begin;
    if (engine_ == nullptr || engine_->layout().num_values != values ||
        engine_->layout().chunk_values != layout.chunk_values ||
        engine_->codec() != assignment.codec ||
        engine_->options().max_norm_ratio != assignment.max_norm_ratio ||
        engine_->options().trim_fraction != assignment.trim_fraction) {
      // The plain mean: the members step their models by it.
      engine_ = std::make_shared<DeltaMean>(
          DeltaMean::Options{ChunkLayout{values, layout.chunk_values}, assignment.codec,
                             assignment.max_norm_ratio, assignment.trim_fraction});
    }
    const int members = static_cast<int>(assignment.members.size());
    engine_->BeginRound(members);
    for (int slot = 0; slot < members; ++slot) {
      if (absl::Status s = engine_->SetWeight(slot, assignment.weights[slot]); !s.ok()) {
        engine_->EndRound();
        return s;
      }
    }
    round_ = Round{std::move(assignment), sink, std::vector<int64_t>(members, -1)};
    // Streams that waited for this layout attach now; those of rounds that are over end.
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      auto next = std::next(it);
      MemberStream& session = it->second;
      if (session.slot == -1) {
        const v1::ReduceHeader& header = session.header;
        const Assignment& now = round_->assignment;
        if (Current(header)) {
          if (absl::Status s = AttachLocked(it->first, session); s.ok()) {
            resumed_.push_back(session.stream);
          } else {
            CloseSession(it->first, s);
          }
        } else if (header.run_id() != now.run_id || header.round() <= now.round) {
          CloseSession(it->first, absl::FailedPreconditionError(absl::StrCat(
                                      "round ", header.round(), " (attempt ", header.attempt(),
                                      ") of run ", header.run_id(), " is not this owner's round")));
        }
      }
      it = next;
    }
  }
  FlushTouched();
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ShardOwner::Attach(const v1::ReduceHeader& header,
                                           std::shared_ptr<ReduceStream> stream, bool* waiting) {
  MutexLock lock(&mu_);
  *waiting = false;
  if (Over(header)) {
    return absl::FailedPreconditionError(absl::StrCat("round: ", header.round(), " (attempt ",
                                                      header.attempt(), ") is over on this owner"));
  }
  const int64_t id = next_session_++;
  MemberStream& session = sessions_[id];
  session.header = header;
  session.stream = std::move(stream);
  if (Current(header)) {
    if (absl::Status s = AttachLocked(id, session); !s.ok()) {
      sessions_.erase(id);
      return s;
    }
  } else if (round_.has_value() && round_->assignment.run_id == header.run_id() &&
             header.round() <= round_->assignment.round) {
    sessions_.erase(id);
    return absl::FailedPreconditionError(absl::StrCat(
        "round: ", header.round(), " is over; this owner is in round ", round_->assignment.round));
  } else {
    *waiting = true;  // this node has not learnt the layout yet
  }
  return id;
}

bool ShardOwner::Over(const v1::ReduceHeader& header) const {
  if (header.run_id() != finished_run_) return false;
  return header.round() < finished_round_ ||
         std::find(finished_attempts_.begin(), finished_attempts_.end(), header.attempt()) !=
             finished_attempts_.end();
}

bool ShardOwner::Current(const v1::ReduceHeader& header) const {
  return round_.has_value() && round_->assignment.run_id == header.run_id() &&
         round_->assignment.round == header.round() &&
         round_->assignment.attempt == header.attempt();
}

absl::Status ShardOwner::AttachLocked(int64_t session_id, MemberStream& session) {
  const std::vector<std::string>& members = round_->assignment.members;
  auto it = std::find(members.begin(), members.end(), session.header.member_id());
  if (it == members.end()) {
    return absl::NotFoundError(absl::StrCat("member_id: ", Quoted(session.header.member_id()),
                                            " is not in round ", round_->assignment.round));
  }
  const int slot = static_cast<int>(it - members.begin());
  if (round_->session_of_slot[slot] != -1) {
    return absl::AlreadyExistsError(
        absl::StrCat("member ", session.header.member_id(), " is already attached"));
  }
  round_->session_of_slot[slot] = session_id;
  session.slot = slot;
  return absl::OkStatus();
}

absl::Status ShardOwner::AddChunk(int64_t session_id, const v1::Chunk& chunk) {
  std::shared_ptr<DeltaMean> engine;
  std::shared_ptr<std::vector<float>> scratch;
  int begin_chunk = 0;
  int end_chunk = 0;
  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end() || it->second.slot < 0 || !round_.has_value()) {
      return absl::FailedPreconditionError("not in this owner's round (dropped, or it ended)");
    }
    engine = engine_;
    scratch = it->second.scratch;
    begin_chunk = round_->assignment.begin_chunk;
    end_chunk = round_->assignment.end_chunk;
  }
  // Checked and decoded outside the lock, so members' chunks decode in parallel.
  const int local = chunk.index() - begin_chunk;
  std::vector<float>& decoded = *scratch;
  absl::Status status;
  if (chunk.index() < begin_chunk || chunk.index() >= end_chunk) {
    status = absl::InvalidArgumentError(absl::StrCat("chunk.index: ", chunk.index(),
                                                     " is outside this owner's range [",
                                                     begin_chunk, ", ", end_chunk, ")"));
  } else {
    status = engine->Check(local, chunk.data(), &decoded);
    if (!status.ok()) {
      // Named by its index in the whole vector, as the member sent it.
      status = absl::InvalidArgumentError(
          absl::StrCat("chunk ", chunk.index(), ": ",
                       absl::StripPrefix(status.message(), absl::StrCat("chunk ", local, ": "))));
    }
  }
  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end() || engine_ != engine || !round_.has_value()) {
      return absl::FailedPreconditionError("not in this owner's round (dropped, or it ended)");
    }
    const int slot = it->second.slot;
    if (status.ok()) status = engine->Add(slot, local, chunk.data(), decoded);
    if (!status.ok()) {
      CloseSession(session_id, status);
    } else {
      Advance();
    }
  }
  FlushTouched();
  return status;
}

void ShardOwner::Advance() {
  const int begin_chunk = round_->assignment.begin_chunk;
  std::vector<std::shared_ptr<const OwnerMean>> means;
  absl::Status failure;
  for (int local : engine_->TakeCompleted()) {
    // Finite deltas can still sum past fp32's range; such a mean must not reach the members.
    const absl::Span<float> mean = engine_->Mean(local);
    v1::ReduceResponse response;
    response.mutable_mean()->set_index(begin_chunk + local);
    if (!AllFinite(mean)) {
      failure = absl::OutOfRangeError(absl::StrCat(
          "update of chunk ", local, " overflows fp32 (the members' deltas are too large)"));
    } else {
      failure =
          EncodeUpdate(engine_->codec(), local, mean, response.mutable_mean()->mutable_data());
    }
    if (!failure.ok()) break;
    means.push_back(std::make_shared<const OwnerMean>(std::move(response)));
  }
  if (!failure.ok()) {
    round_->sink->OnFailure(failure);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      auto next = std::next(it);
      if (it->second.slot >= 0) CloseSession(it->first, failure);
      it = next;
    }
    return;
  }
  for (const DeltaMean::Exclusion& e : engine_->TakeExclusions()) {
    LogWarning(absl::StrFormat(
        "round %d: %s's delta left out of chunks [%d, %d): norm %.6g is more than "
        "max_delta_norm_ratio %g times the median of the others' (%.6g)",
        round_->assignment.round, round_->assignment.members[e.slot], begin_chunk,
        round_->assignment.end_chunk, e.norm, round_->assignment.max_norm_ratio, e.others_median));
  }
  for (const std::shared_ptr<const OwnerMean>& message : means) {
    const std::vector<int64_t>& session_of_slot = round_->session_of_slot;
    for (int slot = 0; slot < static_cast<int>(session_of_slot.size()); ++slot) {
      auto it = sessions_.find(session_of_slot[slot]);
      if (it == sessions_.end()) continue;
      it->second.stream->Enqueue(message);
      touched_.Add(it->second.stream);
    }
  }
  if (engine_->AllComplete()) {
    for (int64_t session_id : round_->session_of_slot) {
      if (sessions_.count(session_id)) CloseSession(session_id, absl::OkStatus());
    }
  }
}

void ShardOwner::CloseSession(int64_t session_id, const absl::Status& status) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  it->second.stream->Close(status);
  touched_.Add(it->second.stream);
  sessions_.erase(it);
}

void ShardOwner::Detach(int64_t session_id) {
  MutexLock lock(&mu_);
  sessions_.erase(session_id);
}

void ShardOwner::Drop(const std::string& member_id) {
  {
    MutexLock lock(&mu_);
    if (!round_.has_value()) return;
    const std::vector<std::string>& members = round_->assignment.members;
    auto it = std::find(members.begin(), members.end(), member_id);
    if (it == members.end()) return;
    const int slot = static_cast<int>(it - members.begin());
    engine_->Drop(slot);
    CloseSession(
        round_->session_of_slot[slot],
        absl::AbortedError(absl::StrCat("member ", member_id, " was dropped from the round")));
    Advance();
  }
  FlushTouched();
}

void ShardOwner::Finish(const std::string& run_id, int64_t round, uint64_t attempt) {
  {
    MutexLock lock(&mu_);
    FinishLocked(run_id, round, attempt);
  }
  FlushTouched();
}

void ShardOwner::FinishLocked(const std::string& run_id, int64_t round, uint64_t attempt) {
  if (run_id != finished_run_) finished_attempts_.clear();
  finished_run_ = run_id;
  finished_round_ = std::max(finished_round_, round);
  finished_attempts_.push_back(attempt);
  if (finished_attempts_.size() > 64) finished_attempts_.pop_front();
  if (round_.has_value() && round_->assignment.run_id == run_id &&
      round_->assignment.attempt == attempt) {
    engine_->EndRound();
    round_.reset();
  }
  const absl::Status over = absl::AbortedError(absl::StrCat("round ", round, " is over"));
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    auto next = std::next(it);
    const v1::ReduceHeader& header = it->second.header;
    if (header.run_id() != run_id || header.round() < round || header.attempt() == attempt) {
      CloseSession(it->first, over);
    }
    it = next;
  }
}

void ShardOwner::FlushTouched() {
  std::vector<std::shared_ptr<ReduceStream>> touched;
  std::vector<std::shared_ptr<ReduceStream>> resumed;
  {
    MutexLock lock(&mu_);
    touched = touched_.Take();
    resumed.swap(resumed_);
  }
  TouchedStreams<ReduceStream>::Flush(std::move(touched));
  for (const auto& stream : resumed) stream->Resume();
}

}  // namespace localsgd
