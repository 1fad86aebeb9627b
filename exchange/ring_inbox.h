#ifndef LOCALSGD_EXCHANGE_RING_INBOX_H_
#define LOCALSGD_EXCHANGE_RING_INBOX_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "common/run_spec.h"
#include "exchange/received_chunk.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// What a node leader receives in a ring round (docs/design.md, "Ring rounds") from the member
// before it, over DataPlane.Pass: the gRPC adapter hands every message here as it arrives, and
// the leader's round takes them in order. The member before may send over several Pass streams
// at once, its stripes (RoundHeader.ring_streams): they are taken as one stream, in the order
// their messages arrive, which ends once every stripe has (or breaks when one does). A stream
// may arrive before the leader knows the round's layout, for any later round (a member
// readmitted after a suspension follows a round far ahead of its last one): its messages wait
// here until the leader follows that attempt, each as its chunk was received (a sum or a mean,
// in gRPC's own buffers). Only streams whose tag proves the coordinator scheduled them to this
// member are given to it (the data plane checks them with StreamTagCheck first), so a stream
// here is one the coordinator made: one per attempt this member is in. What they can make it
// hold is bounded (docs/design.md, "Ring rounds", bounds): at most kMaxStreams streams (each of
// at most kMaxRingStreams stripes), the oldest early one giving way to a newer one, and no
// stream more than a round's bytes (Follow's `stream_bytes`; kFirstStreamBytes before the first
// Follow). Thread-safe.
class RingInbox {
 public:
  static constexpr int kMaxStreams = 3;  // the followed attempt's, and two that came early
  static constexpr int64_t kFirstStreamBytes = int64_t{1} << 30;

  // Server side. A stripe opens with its header, whose tag was checked: INVALID_ARGUMENT for a
  // stripe outside [0, stripes) or stripes outside [1, kMaxRingStreams] or unlike its stream's
  // other stripes', FAILED_PRECONDITION for an attempt older than the one followed (same run),
  // ALREADY_EXISTS for a second stripe of the same number, attempt and sender,
  // RESOURCE_EXHAUSTED when kMaxStreams are open and none of those not followed is older than
  // this one (else the oldest of them is forgotten). Returns the stripe's id.
  absl::StatusOr<int64_t> Open(const v1::ReduceHeader& header);
  // A message of stripe `id` (not a header): FAILED_PRECONDITION once its attempt is no longer
  // followed (a newer one is), RESOURCE_EXHAUSTED (the stream is forgotten) when it brings the
  // stream past a round's bytes; either way the stripe ends.
  absl::Status Add(int64_t id, ReceivedChunk message);
  // Stripe `id` ended: OK when the sender finished it, else why not (which ends its stream).
  void Close(int64_t id, const absl::Status& status);

  // Leader side. From now on the leader takes the messages of (run_id, round, attempt) from
  // member `from`, who sends at most `stream_bytes` of chunk data in a round (streams are cut
  // past it); streams of other runs and earlier attempts, and the followed attempt's from
  // anyone else, are forgotten.
  void Follow(const std::string& run_id, int64_t round, uint64_t attempt, const std::string& from,
              int64_t stream_bytes = kFirstStreamBytes);
  // The next message of the followed attempt, waiting for it; nullopt once its stream ended
  // OK and every message was taken. Errors: the stream's (it broke), CANCELLED (Stop).
  absl::StatusOr<std::optional<ReceivedChunk>> Next();
  // The followed round is over for the leader: Next returns CANCELLED, messages still arriving
  // for it are dropped.
  void Stop();

 private:
  struct Key {
    std::string run_id;
    int64_t round = 0;
    uint64_t attempt = 0;
    bool operator==(const Key& other) const {
      return run_id == other.run_id && round == other.round && attempt == other.attempt;
    }
  };
  // One sender's stream of one attempt: its stripes' messages, as they came.
  struct Stream {
    Key key;
    std::string from;
    uint32_t stripes = 1;
    uint32_t opened = 0;  // bit s: stripe s opened
    uint32_t ended = 0;   // bit s: stripe s ended OK
    std::deque<ReceivedChunk> queue;
    int64_t bytes = 0;    // chunk data received, taken or not
    bool closed = false;  // every stripe ended OK, or one broke (status)
    absl::Status status;
  };
  // Stripe ids: the stream's id times kMaxRingStreams, plus the stripe.
  static int64_t StreamOf(int64_t id) { return id / kMaxRingStreams; }
  // Whether `stream` is the followed attempt's, from the followed member.
  bool IsFollowed(const Stream& stream) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The followed attempt's stream, or null.
  Stream* Followed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<int64_t, Stream> streams_ ABSL_GUARDED_BY(mu_);
  std::optional<Key> followed_ ABSL_GUARDED_BY(mu_);
  std::string from_ ABSL_GUARDED_BY(mu_);
  int64_t stream_bytes_ ABSL_GUARDED_BY(mu_) = kFirstStreamBytes;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_RING_INBOX_H_
