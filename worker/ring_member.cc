#include "worker/ring_member.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/codec.h"
#include "common/status_macros.h"
#include "common/status_util.h"

namespace localsgd {

RingMember::RingMember(Setup setup) : setup_(std::move(setup)) {
  const v1::RoundHeader& header = *setup_.header;
  const int n = header.members_size();
  pred_ = (setup_.self + n - 1) % n;
  succ_ = (setup_.self + 1) % n;
  double total = 0;
  for (double w : header.weights()) total += w;
  weight_ = static_cast<float>(header.weights(setup_.self));
  inverse_total_ = static_cast<float>(1.0 / total);
  shard_of_.resize(static_cast<size_t>(setup_.layout->num_chunks()));
  for (int s = 0; s < header.shards_size(); ++s) {
    for (int c = header.shards(s).begin_chunk(); c < header.shards(s).end_chunk(); ++c) {
      shard_of_[c] = s;
    }
  }
  const auto size = [&header](int s) {
    return header.shards(s).end_chunk() - header.shards(s).begin_chunk();
  };
  const int chunks = setup_.layout->num_chunks();
  expected_in_ = (chunks - size(pred_)) + (chunks - size(pred_) - size(setup_.self));
  expected_out_ = (chunks - size(setup_.self)) + (chunks - size(setup_.self) - size(succ_));
  sums_seen_.assign(static_cast<size_t>(chunks), false);
  writer_ = std::thread([this] { Write(); });
  reader_ = std::thread([this] { Read(); });
}

RingMember::~RingMember() { Stop(); }

void RingMember::PassOn(const v1::Chunk& mean) {
  v1::PassRequest pass;
  *pass.mutable_mean() = mean;
  Send(std::move(pass));
}

void RingMember::Stop() {
  {
    MutexLock lock(&mu_);
    stopped_ = true;
  }
  setup_.context->TryCancel();
  setup_.inbox->Stop();
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
}

void RingMember::Fail(int slot, const absl::Status& status) {
  {
    MutexLock lock(&mu_);
    if (stopped_) return;  // the round ended: cancelled streams say nothing
  }
  setup_.unreachable(setup_.header->members(slot), status);
}

void RingMember::Send(v1::PassRequest message) {
  MutexLock lock(&mu_);
  outgoing_.push_back(std::move(message));
}

void RingMember::OwnDelta(int c, std::vector<float>* out) const {
  // Rings are fp32: the delta as the others would see it is params - global itself.
  const size_t begin = static_cast<size_t>(setup_.layout->begin(c));
  const size_t n = static_cast<size_t>(setup_.layout->size(c));
  out->resize(n);
  for (size_t k = 0; k < n; ++k) {
    (*out)[k] = weight_ * (setup_.params[begin + k] - setup_.global[begin + k]);
  }
}

void RingMember::Write() {
  v1::PassResponse response;
  auto stub = v1::DataPlane::NewStub(setup_.succ_channel);
  std::unique_ptr<grpc::ClientWriter<v1::PassRequest>> stream =
      stub->Pass(setup_.context.get(), &response);
  v1::PassRequest first;
  *first.mutable_header() = setup_.pass_header;
  bool ok = stream->Write(first);
  int sent = 0;
  while (ok && sent < expected_out_) {
    v1::PassRequest message;
    {
      MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](RingMember* m)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return m->stopped_ || !m->outgoing_.empty(); },
          this));
      if (stopped_) break;
      message = std::move(outgoing_.front());
      outgoing_.pop_front();
    }
    ok = stream->Write(message);
    ++sent;
  }
  if (ok && sent == expected_out_) stream->WritesDone();
  const grpc::Status status = stream->Finish();
  if (!status.ok() || !ok) {
    Fail(succ_, status.ok() ? absl::UnavailableError("the stream broke") : FromGrpcStatus(status));
  }
}

void RingMember::Read() {
  // The chain of pred's range starts here.
  const v1::ShardRange& first = setup_.header->shards(pred_);
  std::vector<float> values;
  for (int c = first.begin_chunk(); c < first.end_chunk(); ++c) {
    OwnDelta(c, &values);
    v1::PassRequest pass;
    pass.mutable_sum()->set_index(c);
    Encode(v1::CODEC_FP32, values, pass.mutable_sum()->mutable_data());
    Send(std::move(pass));
  }
  absl::Status status;
  for (int taken = 0; status.ok() && taken < expected_in_; ++taken) {
    absl::StatusOr<std::optional<v1::PassRequest>> next = setup_.inbox->Next();
    if (!next.ok()) {
      status = next.status();
    } else if (!next->has_value()) {
      status = absl::UnavailableError(
          absl::StrCat("its stream ended after ", taken, " of ", expected_in_, " messages"));
    } else {
      status = Take(**next, &values);
    }
  }
  if (!status.ok() && !absl::IsCancelled(status)) Fail(pred_, status);
}

absl::Status RingMember::Take(const v1::PassRequest& message, std::vector<float>* values) {
  const bool sum = message.has_sum();
  const v1::Chunk& chunk = sum ? message.sum() : message.mean();
  const int c = chunk.index();
  if (!sum && !message.has_mean()) return absl::InvalidArgumentError("neither sum nor mean");
  if (c < 0 || c >= setup_.layout->num_chunks()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", c, " is out of range"));
  }
  const int s = shard_of_[c];
  if (!sum) {
    if (s == setup_.self || s == pred_) {
      return absl::InvalidArgumentError(absl::StrCat("a mean of chunk ", c, " came on the ring"));
    }
    LOCALSGD_RETURN_IF_ERROR(setup_.take_mean(s, chunk));
    if (s != succ_) {
      v1::PassRequest pass;
      *pass.mutable_mean() = chunk;
      Send(std::move(pass));
    }
    return absl::OkStatus();
  }
  if (s == pred_ || sums_seen_[c]) {
    return absl::InvalidArgumentError(absl::StrCat("an unexpected sum of chunk ", c));
  }
  sums_seen_[c] = true;
  const size_t n = static_cast<size_t>(setup_.layout->size(c));
  std::vector<float> incoming(n);
  LOCALSGD_RETURN_IF_ERROR(Decode(v1::CODEC_FP32, chunk.data(), absl::MakeSpan(incoming)));
  if (!AllFinite(incoming)) {
    return absl::InvalidArgumentError(absl::StrCat("the sum of chunk ", c, " is not finite"));
  }
  OwnDelta(c, values);
  for (size_t k = 0; k < n; ++k) incoming[k] += (*values)[k];
  if (s != setup_.self) {
    v1::PassRequest pass;
    pass.mutable_sum()->set_index(c);
    Encode(v1::CODEC_FP32, incoming, pass.mutable_sum()->mutable_data());
    Send(std::move(pass));
    return absl::OkStatus();
  }
  // The sum of this member's own range is complete: its mean, encoded once (rings are fp32;
  // a mean past fp32's range is refused by the coordinator, which aborts the round).
  for (float& v : incoming) v *= inverse_total_;
  v1::ReduceResponse response;
  response.mutable_mean()->set_index(c);
  Encode(v1::CODEC_FP32, incoming, response.mutable_mean()->mutable_data());
  auto mean = std::make_shared<const OwnerMean>(std::move(response));
  setup_.sink->OnMean(c, mean);
  return setup_.take_mean(setup_.self, mean->message().mean());
}

}  // namespace localsgd
