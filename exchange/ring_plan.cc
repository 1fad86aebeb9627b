#include "exchange/ring_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "exchange/codec.h"

namespace localsgd {

RingPlan::RingPlan(const v1::RoundHeader& header, const ChunkLayout& layout, int self)
    : layout_(layout), codec_(header.codec()), self_(self) {
  const int n = header.members_size();
  pred_ = (self + n - 1) % n;
  succ_ = (self + 1) % n;
  others_ = n - 1;
  double total = 0;
  for (double w : header.weights()) total += w;
  weight_ = static_cast<float>(header.weights(self));
  inverse_total_ = static_cast<float>(1.0 / total);
  const int chunks = layout.num_chunks();
  range_of_.resize(static_cast<size_t>(chunks));
  for (int s = 0; s < header.shards_size(); ++s) {
    std::fill(range_of_.begin() + header.shards(s).begin_chunk(),
              range_of_.begin() + header.shards(s).end_chunk(), s);
  }
  const auto size = [&header](int s) {
    return header.shards(s).end_chunk() - header.shards(s).begin_chunk();
  };
  expected_in_ = (chunks - size(pred_)) + (chunks - size(self));
  expected_out_ = (chunks - size(self)) + (chunks - size(succ_));
  chain_begin_ = header.shards(pred_).begin_chunk();
  chain_end_ = header.shards(pred_).end_chunk();
  sums_seen_.assign(static_cast<size_t>(chunks), false);
}

// A sum from pred is one of N - 1 per chain this member starts, so starting at most kChainLead
// chunks more than 1 / (N - 1) of the sums in keeps the chains moving together (every range's
// means complete from early on, while the sums still flow), where starting the whole chain at
// once would put it in the socket's buffers ahead of every sum to pass on, and the means would
// all complete at the end.
bool RingPlan::MayStartChain(int next, int sums_in) const {
  return next < chain_end_ && next - chain_begin_ < kChainLead + sums_in / others_;
}

absl::StatusOr<RingPlan::Accepted> RingPlan::Accept(int field, int c, size_t bytes) {
  const bool sum = field == v1::PassRequest::kSumFieldNumber;
  if (!sum && field != v1::PassRequest::kMeanFieldNumber) {
    return absl::InvalidArgumentError("neither sum nor mean");
  }
  if (c < 0 || c >= layout_.num_chunks()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", c, " is out of range"));
  }
  const int s = range_of_[c];
  if (!sum) {
    if (s == self_) {
      return absl::InvalidArgumentError(absl::StrCat("a mean of chunk ", c, " came on the ring"));
    }
    return Accepted{Action::kTakeMean, s, s != succ_};
  }
  if (s == pred_ || sums_seen_[c]) {
    return absl::InvalidArgumentError(absl::StrCat("an unexpected sum of chunk ", c));
  }
  sums_seen_[c] = true;
  const int64_t n = layout_.size(c);
  if (const size_t expected = EncodedBytes(codec_, n); bytes != expected) {
    return absl::InvalidArgumentError(absl::StrCat("the sum of chunk ", c, ": ", bytes,
                                                   " bytes, expected ", expected, " for ", n,
                                                   " values in ", CodecName(codec_)));
  }
  return Accepted{s == self_ ? Action::kCompleteAverage : Action::kAddAndPass, s, false};
}

}  // namespace localsgd
