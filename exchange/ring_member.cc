#include "exchange/ring_member.h"

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "exchange/chunk_wire.h"
#include "exchange/codec.h"
#include "exchange/float_bits.h"
#include "exchange/write_batch.h"

namespace localsgd {

RingMember::RingMember(Setup setup)
    : setup_(std::move(setup)), plan_(*setup_.header, *setup_.layout, setup_.self) {
  chain_next_ = plan_.chain_begin();
  for (int stripe = 0; stripe < static_cast<int>(setup_.succ_channels.size()); ++stripe) {
    writers_.emplace_back([this, stripe] { Write(stripe); });
  }
  reader_ = std::thread([this] { Read(); });
}

RingMember::~RingMember() { Stop(false).IgnoreError(); }

absl::Status RingMember::Stop(bool) {
  {
    MutexLock lock(&mu_);
    stopped_ = true;
  }
  for (const auto& context : setup_.contexts) context->TryCancel();
  setup_.inbox->Stop();
  for (std::thread& writer : writers_) {
    if (writer.joinable()) writer.join();
  }
  if (reader_.joinable()) reader_.join();
  MutexLock lock(&mu_);
  return failure_;
}

void RingMember::Fail(int slot, const absl::Status& status) {
  {
    MutexLock lock(&mu_);
    if (stopped_) return;  // the round ended: cancelled streams say nothing
    if (failure_.ok()) failure_ = status;
  }
  setup_.unreachable(setup_.header->members(slot), status);
}

void RingMember::Queue(int field, grpc::ByteBuffer message) {
  MutexLock lock(&mu_);
  (field == v1::PassRequest::kMeanFieldNumber ? means_out_ : sums_out_)
      .push_back(std::move(message));
}

bool RingMember::ReadyToWrite() const {
  if (stopped_ || AllTaken() || !means_out_.empty() || !sums_out_.empty()) return true;
  return plan_.MayStartChain(chain_next_, sums_in_);
}

// In fp32 a sum travels as little-endian floats (memcpy: the bytes may be unaligned; the loops
// vectorise); in a lossy codec it is encoded.
grpc::Slice RingMember::OwnDelta(int c) const {
  const size_t begin = static_cast<size_t>(setup_.layout->begin(c));
  const size_t n = static_cast<size_t>(setup_.layout->size(c));
  const float* params = setup_.params.data() + begin;
  const float* global = setup_.global.data() + begin;
  if (lossy()) {
    std::vector<float> delta(n);
    for (size_t k = 0; k < n; ++k) delta[k] = plan_.weight() * (params[k] - global[k]);
    std::string encoded;
    Encode(setup_.header->codec(), delta, &encoded);
    return grpc::Slice(encoded);
  }
  grpc::Slice data(n * sizeof(float));  // not zero-filled first
  char* bytes = reinterpret_cast<char*>(const_cast<uint8_t*>(data.begin()));
  for (size_t k = 0; k < n; ++k) {
    const float delta = plan_.weight() * (params[k] - global[k]);
    std::memcpy(bytes + k * sizeof(float), &delta, sizeof(float));
  }
  return data;
}

namespace {

// out[j] = (in[j] + w * (params[j] - global[j])) * scale over n little-endian floats (memcpy:
// the bytes may be unaligned; the loop vectorises). Nonzero if an in[j] is NaN or infinite.
uint32_t AddRun(const char* __restrict in, const float* __restrict params,
                const float* __restrict global, float w, float scale, char* __restrict out,
                size_t n) {
  uint32_t bad = 0;
  for (size_t j = 0; j < n; ++j) {
    uint32_t u;
    std::memcpy(&u, in + j * sizeof(float), sizeof(float));
    bad |= NotFiniteBits(u);
    float value;
    std::memcpy(&value, &u, sizeof(float));
    value = (value + w * (params[j] - global[j])) * scale;
    std::memcpy(out + j * sizeof(float), &value, sizeof(float));
  }
  return bad;
}

}  // namespace

absl::Status RingMember::AddOwnDeltaEncoded(int c, const ReceivedChunk& sum, float scale,
                                            std::string* out) const {
  const size_t begin = static_cast<size_t>(setup_.layout->begin(c));
  std::vector<float> values(static_cast<size_t>(setup_.layout->size(c)));
  if (absl::Status s = sum.Decode(setup_.header->codec(), absl::MakeSpan(values)); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the sum of chunk ", c, ": ", s.message()));
  }
  const float* params = setup_.params.data() + begin;
  const float* global = setup_.global.data() + begin;
  for (size_t k = 0; k < values.size(); ++k) {
    values[k] = (values[k] + plan_.weight() * (params[k] - global[k])) * scale;
  }
  Encode(setup_.header->codec(), values, out);
  return absl::OkStatus();
}

bool RingMember::AddOwnDelta(int c, const ReceivedChunk& sum, float scale, char* bytes) const {
  const size_t begin = static_cast<size_t>(setup_.layout->begin(c));
  const float* params = setup_.params.data() + begin;
  const float* global = setup_.global.data() + begin;
  uint32_t bad = 0;
  sum.ForEachFp32Run([&](const char* in, size_t k, size_t n) {
    bad |= AddRun(in, params + k, global + k, plan_.weight(), scale, bytes + k * sizeof(float), n);
  });
  return bad == 0;
}

void RingMember::Write(int stripe) {
  // A Pass stream of raw buffers (see Send): the same call the generated stub makes.
  const std::shared_ptr<grpc::Channel>& channel = setup_.succ_channels[stripe];
  const grpc::internal::RpcMethod pass(kDataPlanePassMethod,
                                       grpc::internal::RpcMethod::CLIENT_STREAMING, channel);
  grpc::ByteBuffer response;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> stream(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
          channel.get(), pass, setup_.contexts[stripe].get(), &response));
  v1::PassRequest first;
  *first.mutable_header() = setup_.pass_header;
  first.mutable_header()->set_stripe(static_cast<uint32_t>(stripe));
  first.mutable_header()->set_stripes(static_cast<uint32_t>(setup_.succ_channels.size()));
  bool ok = stream->Write(SerializedBuffer(first));
  bool done = false;  // every message of the round went to some stripe
  WriteBatch batch;
  while (ok) {
    // What this stripe writes next: the queued messages (up to a batch's bytes), or the start
    // of a chunk of pred's chain. Taken together because only a message this same stream writes
    // next may follow one sent with the buffer hint: taken by another stripe, it would leave
    // the hinted one held in gRPC's buffers while succ waits for it, and the ring would stall.
    std::vector<grpc::ByteBuffer> messages;
    int start = -1;  // a chunk of pred's range whose chain starts with this message
    {
      MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &RingMember::ReadyToWrite));
      if (stopped_) break;
      if (AllTaken()) {
        done = true;
        break;
      }
      if (means_out_.empty() && sums_out_.empty()) {
        start = chain_next_++;
        ++taken_;
      }
      for (int64_t bytes = 0;
           start < 0 && bytes < WriteBatch::kDefaultMaxHeldBytes && !AllTaken();) {
        std::deque<grpc::ByteBuffer>& queue = means_out_.empty() ? sums_out_ : means_out_;
        if (queue.empty()) break;
        bytes += static_cast<int64_t>(queue.front().Length());
        messages.push_back(std::move(queue.front()));
        queue.pop_front();
        ++taken_;
      }
    }
    if (start >= 0) {
      messages.push_back(
          ChunkMessageBuffer(v1::PassRequest::kSumFieldNumber, start, OwnDelta(start)));
    }
    for (size_t i = 0; ok && i < messages.size(); ++i) {
      ok = stream->Write(messages[i], batch.Next(static_cast<int64_t>(messages[i].Length()),
                                                 i + 1 < messages.size()));
    }
  }
  if (ok && done) stream->WritesDone();
  const grpc::Status status = stream->Finish();
  if (!status.ok() || !ok) {
    Fail(plan_.succ(),
         status.ok() ? absl::UnavailableError("the stream broke") : FromGrpcStatus(status));
  }
}

void RingMember::Read() {
  absl::Status status;
  for (int taken = 0; status.ok() && taken < plan_.expected_in(); ++taken) {
    absl::StatusOr<std::optional<ReceivedChunk>> next = setup_.inbox->Next();
    if (!next.ok()) {
      status = next.status();
    } else if (!next->has_value()) {
      status = absl::UnavailableError(
          absl::StrCat("its stream ended after ", taken, " of ", plan_.expected_in(), " messages"));
    } else {
      status = Take(**next);
    }
  }
  if (!status.ok() && !absl::IsCancelled(status)) Fail(plan_.pred(), status);
}

absl::Status RingMember::Take(const ReceivedChunk& message) {
  const int c = message.index();
  LOCALSGD_ASSIGN_OR_RETURN(RingPlan::Accepted accepted,
                            plan_.Accept(message.field(), c, message.size()));
  if (accepted.action == RingPlan::Action::kTakeMean) {
    LOCALSGD_RETURN_IF_ERROR(setup_.take_mean(accepted.range, message));
    // Passed on in the message it came in.
    if (accepted.passes_on) Queue(v1::PassRequest::kMeanFieldNumber, message.wire());
    return absl::OkStatus();
  }
  {
    MutexLock lock(&mu_);
    ++sums_in_;  // lets the writer start one more chunk of pred's chain every N - 1 sums
  }
  // The sum goes on with this member's delta added, written into a new slice that is sent as
  // it is; or, for this member's own range, it is complete: its mean (a mean past fp32's range
  // is refused by the coordinator, which aborts the round). In a lossy codec the sum is decoded,
  // added to in fp32 and encoded again.
  const auto refused = [c] {
    return absl::InvalidArgumentError(
        absl::StrCat("the sum of chunk ", c, ": chunk data: decodes to NaN or infinity"));
  };
  if (accepted.action == RingPlan::Action::kAddAndPass) {
    grpc::Slice next;
    if (lossy()) {
      std::string encoded;
      LOCALSGD_RETURN_IF_ERROR(AddOwnDeltaEncoded(c, message, 1.0f, &encoded));
      next = grpc::Slice(encoded);
    } else {
      next = grpc::Slice(message.size());  // not zero-filled first
      if (!AddOwnDelta(c, message, 1.0f,
                       reinterpret_cast<char*>(const_cast<uint8_t*>(next.begin())))) {
        return refused();
      }
    }
    Queue(v1::PassRequest::kSumFieldNumber,
          ChunkMessageBuffer(v1::PassRequest::kSumFieldNumber, c, std::move(next)));
    return absl::OkStatus();
  }
  v1::ReduceResponse response;
  v1::Chunk* chunk = response.mutable_mean();
  chunk->set_index(c);
  if (lossy()) {
    LOCALSGD_RETURN_IF_ERROR(
        AddOwnDeltaEncoded(c, message, plan_.inverse_total(), chunk->mutable_data()));
  } else {
    chunk->mutable_data()->resize(message.size());
    if (!AddOwnDelta(c, message, plan_.inverse_total(), chunk->mutable_data()->data()))
      return refused();
  }
  auto mean = std::make_shared<const OwnerMean>(std::move(response));
  // To succ in the bytes it lies in (ChunkMessageBuffer), where the generated stub's
  // serialiser would copy it.
  Queue(v1::PassRequest::kMeanFieldNumber,
        ChunkMessageBuffer(v1::PassRequest::kMeanFieldNumber, mean->message().mean(), mean));
  return setup_.take_mean(setup_.self, ReceivedChunk::Of(v1::PassRequest::kMeanFieldNumber,
                                                         mean->message().mean(), mean));
}

}  // namespace localsgd
