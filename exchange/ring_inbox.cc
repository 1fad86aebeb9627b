#include "exchange/ring_inbox.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace localsgd {
namespace {

// Whether (round, attempt) comes before (other_round, other_attempt).
bool Before(int64_t round, uint64_t attempt, int64_t other_round, uint64_t other_attempt) {
  return round < other_round || (round == other_round && attempt < other_attempt);
}

}  // namespace

absl::StatusOr<int64_t> RingInbox::Open(const v1::ReduceHeader& header) {
  const uint32_t stripes = std::max<uint32_t>(header.stripes(), 1);
  if (stripes > static_cast<uint32_t>(kMaxRingStreams) || header.stripe() >= stripes) {
    return absl::InvalidArgumentError(absl::StrCat("header.stripe: ", header.stripe(), " of ",
                                                   header.stripes(), " stripes (at most ",
                                                   kMaxRingStreams, ")"));
  }
  const uint32_t bit = uint32_t{1} << header.stripe();
  MutexLock lock(&mu_);
  const Key key{header.run_id(), header.round(), header.attempt()};
  if (followed_.has_value() && followed_->run_id == key.run_id &&
      Before(key.round, key.attempt, followed_->round, followed_->attempt)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "round ", key.round, " attempt ", key.attempt, " is over here (this member follows round ",
        followed_->round, " attempt ", followed_->attempt, ")"));
  }
  for (auto& [id, stream] : streams_) {
    if (!(stream.key == key && stream.from == header.member_id())) continue;
    if (stream.stripes != stripes) {
      return absl::InvalidArgumentError(absl::StrCat("header.stripes: ", stripes, ", where the ",
                                                     "stream's other stripes said ",
                                                     stream.stripes));
    }
    if ((stream.opened & bit) != 0) {
      return absl::AlreadyExistsError(absl::StrCat("a second stream for round ", key.round,
                                                   " attempt ", key.attempt, " (stripe ",
                                                   header.stripe(), ")"));
    }
    stream.opened |= bit;
    return id * kMaxRingStreams + header.stripe();
  }
  if (static_cast<int>(streams_.size()) >= kMaxStreams) {
    // The oldest stream not followed gives way to a newer one: its attempt is over or will be.
    auto oldest = streams_.end();
    for (auto it = streams_.begin(); it != streams_.end(); ++it) {
      if (followed_.has_value() && it->second.key == *followed_) continue;
      if (oldest == streams_.end() ||
          Before(it->second.key.round, it->second.key.attempt, oldest->second.key.round,
                 oldest->second.key.attempt)) {
        oldest = it;
      }
    }
    if (oldest == streams_.end() ||
        !Before(oldest->second.key.round, oldest->second.key.attempt, key.round, key.attempt)) {
      return absl::ResourceExhaustedError(
          absl::StrCat(streams_.size(), " ring streams are open here already"));
    }
    streams_.erase(oldest);
  }
  const int64_t id = next_id_++;
  Stream& stream = streams_[id];
  stream.key = key;
  stream.from = header.member_id();
  stream.stripes = stripes;
  stream.opened = bit;
  return id * kMaxRingStreams + header.stripe();
}

absl::Status RingInbox::Add(int64_t id, ReceivedChunk message) {
  MutexLock lock(&mu_);
  auto it = streams_.find(StreamOf(id));
  if (it == streams_.end()) {
    return absl::FailedPreconditionError("this member follows a newer attempt");
  }
  // The followed round is over for this member: what still comes is not needed.
  if (stopped_ && followed_.has_value() && it->second.key == *followed_) return absl::OkStatus();
  Stream& stream = it->second;
  stream.bytes += static_cast<int64_t>(message.size());
  if (stream.bytes > stream_bytes_) {
    const int64_t sent = stream.bytes;
    if (followed_.has_value() && stream.key == *followed_) {
      // The leader reads this one: it sees the stream end with the error.
      stream.queue.clear();
      stream.closed = true;
      stream.status = absl::ResourceExhaustedError("the ring's stream brought more than a round");
    } else {
      streams_.erase(it);
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("the stream brought ", sent, " bytes, more than a round's ", stream_bytes_));
  }
  stream.queue.push_back(std::move(message));
  return absl::OkStatus();
}

void RingInbox::Close(int64_t id, const absl::Status& status) {
  MutexLock lock(&mu_);
  auto it = streams_.find(StreamOf(id));
  if (it == streams_.end() || it->second.closed) return;
  Stream& stream = it->second;
  if (!status.ok()) {
    stream.closed = true;
    stream.status = status;
    return;
  }
  stream.ended |= uint32_t{1} << (id % kMaxRingStreams);
  stream.closed = stream.ended == (uint32_t{1} << stream.stripes) - 1;
}

void RingInbox::Follow(const std::string& run_id, int64_t round, uint64_t attempt,
                       const std::string& from, int64_t stream_bytes) {
  MutexLock lock(&mu_);
  followed_ = Key{run_id, round, attempt};
  from_ = from;
  stream_bytes_ = stream_bytes;
  stopped_ = false;
  // Streams of this attempt (from `from`) or a newer one may already be here; the others are
  // over.
  for (auto it = streams_.begin(); it != streams_.end();) {
    const Key& key = it->second.key;
    const bool kept = key.run_id == run_id && !Before(key.round, key.attempt, round, attempt) &&
                      it->second.bytes <= stream_bytes &&
                      (!(key == *followed_) || IsFollowed(it->second));
    it = kept ? std::next(it) : streams_.erase(it);
  }
}

bool RingInbox::IsFollowed(const Stream& stream) const {
  return followed_.has_value() && stream.key == *followed_ && stream.from == from_;
}

RingInbox::Stream* RingInbox::Followed() {
  for (auto& [id, stream] : streams_) {
    if (IsFollowed(stream)) return &stream;
  }
  return nullptr;
}

absl::StatusOr<std::optional<ReceivedChunk>> RingInbox::Next() {
  MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](RingInbox* inbox) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        if (inbox->stopped_) return true;
        const Stream* stream = inbox->Followed();
        return stream != nullptr && (stream->closed || !stream->queue.empty());
      },
      this));
  if (stopped_) return absl::CancelledError("the round ended");
  Stream* stream = Followed();
  if (!stream->queue.empty()) {
    std::optional<ReceivedChunk> message(std::move(stream->queue.front()));
    stream->queue.pop_front();
    return message;
  }
  if (!stream->status.ok()) return stream->status;
  return std::nullopt;
}

void RingInbox::Stop() {
  MutexLock lock(&mu_);
  stopped_ = true;
  if (Stream* stream = Followed()) stream->queue.clear();
}

}  // namespace localsgd
