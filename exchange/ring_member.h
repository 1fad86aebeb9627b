#ifndef LOCALSGD_EXCHANGE_RING_MEMBER_H_
#define LOCALSGD_EXCHANGE_RING_MEMBER_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "exchange/chunking.h"
#include "exchange/range_schedule.h"
#include "exchange/received_chunk.h"
#include "exchange/ring_inbox.h"
#include "exchange/ring_plan.h"
#include "exchange/shard_owner.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"

namespace localsgd {

// A node leader's part of a ring round (docs/design.md, "Ring rounds"), on flat float vectors
// (no LibTorch), as RingPlan lays it out: it passes to succ over DataPlane.Pass streams the
// running sums (in the round's codec, added to in fp32) (its own weighted delta starts pred's
// chain; every other sum but its own range's goes on with its delta added) and the averaged chunks
// it gets. A sum of its own range that arrives is complete: its mean goes to succ and into this
// member's update. A writer thread per stripe
// (RoundHeader.ring_streams: one stream each, on a connection of its own) sends whatever is next
// when its stream has room, and a reader thread takes pred's stream from the inbox, from
// construction until Stop. Errors name the neighbour through `unreachable`. Each writer sends means
// first, then sums to pass on, and starts a chain only within RingPlan's lead. Thread-safe.
class RingMember : public RangeSchedule {
 public:
  // Takes averaged chunk `mean` of range `shard` into the member's update.
  using TakeMean = std::function<absl::Status(int shard, const ReceivedChunk& mean)>;
  struct Setup {
    const v1::RoundHeader* header = nullptr;  // a ring layout (one range per member)
    v1::ReduceHeader pass_header;             // names this member and the attempt
    const ChunkLayout* layout = nullptr;
    int self = 0;  // this member's slot
    absl::Span<const float> params, global;
    // One per stripe, each channel on a connection of its own, and its Pass stream's context.
    std::vector<std::shared_ptr<grpc::Channel>> succ_channels;
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    RingInbox* inbox = nullptr;  // this node's; followed by the caller
    TakeMean take_mean;
    // The round cannot complete: the neighbour `member_id` broke its stream or sent what the
    // ring does not expect. Not called once Stop began.
    std::function<void(const std::string& member_id, const absl::Status& why)> unreachable;
  };

  explicit RingMember(Setup setup);
  ~RingMember() override;
  RingMember(const RingMember&) = delete;
  RingMember& operator=(const RingMember&) = delete;

  absl::Status Stop(bool committed) override;

 private:
  void Fail(int slot, const absl::Status& status);
  // Queues message `message` for succ, a PassRequest with field `field` (sum or mean) set.
  void Queue(int field, grpc::ByteBuffer message);
  // Whether the writer has something to send: a queued message, or the start of the next
  // chunk of pred's chain within its allowance.
  bool ReadyToWrite() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every message of the round went to a writer.
  bool AllTaken() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return taken_ >= plan_.expected_out();
  }
  // This member's weighted delta over chunk `c` (a sum's start), in the round's codec, in a
  // slice of its own.
  grpc::Slice OwnDelta(int c) const;
  // fp32 rounds: writes (sum + this member's weighted delta over chunk `c`) * scale to `out`,
  // reading the fp32 sum `sum` where it was received (its size checked by the caller: one float per
  // value of the chunk, as `out` has room for). False if a value of `sum` is NaN or infinite.
  bool AddOwnDelta(int c, const ReceivedChunk& sum, float scale, char* out) const;
  // Lossy codecs: `sum` decoded, this member's weighted delta over chunk `c` added in fp32,
  // times `scale`, encoded with the round's codec into `out`. INVALID_ARGUMENT for a sum that
  // does not decode.
  absl::Status AddOwnDeltaEncoded(int c, const ReceivedChunk& sum, float scale,
                                  std::string* out) const;
  bool lossy() const {
    return setup_.header->codec() != v1::CODEC_FP32 &&
           setup_.header->codec() != v1::CODEC_UNSPECIFIED;
  }
  void Write(int stripe);
  void Read();
  // One message from pred, read where it was received: a sum goes on with this member's delta
  // added (or becomes a mean), and a mean is taken and passed on in the message it came in.
  absl::Status Take(const ReceivedChunk& message);

  Setup setup_;
  RingPlan plan_;  // Accept is the reader's
  Mutex mu_;
  // Means and sums to pass on, each sent in the order they came.
  std::deque<grpc::ByteBuffer> means_out_ ABSL_GUARDED_BY(mu_);
  std::deque<grpc::ByteBuffer> sums_out_ ABSL_GUARDED_BY(mu_);
  int chain_next_ ABSL_GUARDED_BY(mu_) = 0;  // the next chunk of pred's range to start
  int sums_in_ ABSL_GUARDED_BY(mu_) = 0;     // sums that came from pred
  int taken_ ABSL_GUARDED_BY(mu_) = 0;       // messages to succ the writers took
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // the first, before Stop
  std::vector<std::thread> writers_;
  std::thread reader_;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_RING_MEMBER_H_
