#ifndef LOCALSGD_EXCHANGE_SHARD_OWNER_H_
#define LOCALSGD_EXCHANGE_SHARD_OWNER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "exchange/chunk_stream.h"
#include "exchange/chunking.h"
#include "exchange/delta_mean.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// An averaged chunk as an owner sends it: one message shared by every member's stream and the
// coordinator's (docs/design.md, "Sharded rounds": the data plane sends its bytes to every
// member without copying them).
class OwnerMean {
 public:
  explicit OwnerMean(v1::ReduceResponse message) : message_(std::move(message)) {}
  const v1::ReduceResponse& message() const { return message_; }

 private:
  const v1::ReduceResponse message_;
};

// One member's DataPlane.Reduce stream as the owner sees it (the gRPC adapter implements it).
class ReduceStream : public ChunkStream<OwnerMean> {
 public:
  // A stream that waited for the round's layout may read on. Called without locks.
  virtual void Resume() = 0;
};

// Where an owner's failure goes: the node leader's uploader, which ends its Sync stream so that
// the coordinator aborts the round. Called under the owner's lock: must not block.
class OwnerFailureSink {
 public:
  virtual ~OwnerFailureSink() = default;
  // The range cannot be averaged (an update that does not fit the codec): the round must abort.
  virtual void OnFailure(const absl::Status& status) = 0;
};

// The owner's side of a sharded round (docs/design.md, "Sharded rounds"): it averages one
// contiguous range of the flat vector over the range reducer (weighted mean in fp32, no
// outer step: every member applies that itself), chunk by chunk as the members' deltas arrive,
// and sends each averaged chunk to every member as soon as it is complete.
// A member's stream may arrive before this node learnt the round's layout from the
// coordinator: it waits (Attach says so) until Install. Knows nothing of gRPC.
// Thread-safe.
class ShardOwner {
 public:
  struct Assignment {
    std::string run_id;
    int64_t round = 0;
    uint64_t attempt = 0;              // RoundHeader.attempt
    std::vector<std::string> members;  // by slot
    std::vector<double> weights;       // by slot
    ChunkLayout layout;                // of the whole vector
    int begin_chunk = 0;               // this owner's range of chunks
    int end_chunk = 0;
    v1::Codec codec = v1::CODEC_FP32;
    // The run's robust aggregation over this range (DeltaMean::Options).
    double max_norm_ratio = 0;
    double trim_fraction = 0;
  };

  // Starts owning a range in a round; `sink` must outlive the round (until Finish). Streams
  // that waited for this round read on.
  absl::Status Install(Assignment assignment, OwnerFailureSink* sink);

  // A member's header. Returns a session id, with *waiting set when the stream must hold its
  // reads until Resume (the round's layout is not known yet). FAILED_PRECONDITION: an attempt
  // or a round that is over; NOT_FOUND: not a member; ALREADY_EXISTS: attached twice.
  absl::StatusOr<int64_t> Attach(const v1::ReduceHeader& header,
                                 std::shared_ptr<ReduceStream> stream, bool* waiting);
  // One chunk of the member's delta (index in the whole vector). On bad input the stream is
  // closed with the error, which is also returned; the member's other chunks stay counted
  // (the coordinator decides whether the round goes on without it).
  absl::Status AddChunk(int64_t session, const v1::Chunk& chunk);
  // The stream ended or was cancelled.
  void Detach(int64_t session);
  // The coordinator dropped the member: stop waiting for its chunks.
  void Drop(const std::string& member_id);
  // The attempt at the round is over (committed or aborted): streams still open end with
  // ABORTED, and so do waiting streams of this attempt or of earlier rounds.
  void Finish(const std::string& run_id, int64_t round, uint64_t attempt);

 private:
  struct MemberStream {
    int slot = -1;  // -1 while waiting for the layout
    v1::ReduceHeader header;
    std::shared_ptr<ReduceStream> stream;
    bool done = false;  // sent every chunk of the range
    // Where this stream's chunks are decoded (outside the lock: one chunk at a time, since
    // one stream delivers them), reused across its chunks.
    std::shared_ptr<std::vector<float>> scratch = std::make_shared<std::vector<float>>();
  };
  struct Round {
    Assignment assignment;
    OwnerFailureSink* sink = nullptr;
    std::vector<int64_t> session_of_slot;
  };

  absl::Status AttachLocked(int64_t session_id, MemberStream& session)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the chunks that are now complete; ends the streams once the range is done.
  void Advance() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseSession(int64_t session_id, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(const std::string& run_id, int64_t round, uint64_t attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The header names an attempt that is over.
  bool Over(const v1::ReduceHeader& header) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The header names the installed attempt.
  bool Current(const v1::ReduceHeader& header) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushTouched() ABSL_LOCKS_EXCLUDED(mu_);

  Mutex mu_;
  std::optional<Round> round_ ABSL_GUARDED_BY(mu_);
  // Kept across rounds while the range keeps its size (no fresh buffers each round).
  std::shared_ptr<DeltaMean> engine_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, MemberStream> sessions_ ABSL_GUARDED_BY(mu_);
  int64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
  // What is over: rounds of the run before the last one finished, and the last attempts.
  std::string finished_run_ ABSL_GUARDED_BY(mu_);
  int64_t finished_round_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<uint64_t> finished_attempts_ ABSL_GUARDED_BY(mu_);
  TouchedStreams<ReduceStream> touched_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<ReduceStream>> resumed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_SHARD_OWNER_H_
