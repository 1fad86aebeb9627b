#ifndef LOCALSGD_EXCHANGE_RANGE_REDUCER_H_
#define LOCALSGD_EXCHANGE_RANGE_REDUCER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "exchange/chunking.h"
#include "exchange/delta_mean.h"
#include "exchange/outer_step.h"
#include "proto/localsgd/v1/run_spec.pb.h"

namespace localsgd {

// A star round's model for one range of the flat vector (the whole vector, or a fragment):
// it holds global[r-1] and the outer momentum, averages the members' deltas (its DeltaMean)
// and, as each chunk's mean is ready, steps it through the outer optimizer and encodes the
// update at once, so it can be sent before later chunks arrive. The update is applied to
// global (and the optimizer state advanced) only on Commit; Abort discards the round.
// Thread-compatible: the caller serialises access.
class RangeReducer {
 public:
  struct Options {
    ChunkLayout layout;  // chunks of the range; chunk indexes are relative to the range
    v1::Codec codec = v1::CODEC_FP32;
    OuterOptimizer outer;
    double max_norm_ratio = 0;  // DeltaMean::Options
    double trim_fraction = 0;
  };

  // `global` is global[r-1] for the range; its size must be layout.num_values.
  RangeReducer(Options options, std::vector<float> global);

  // Opens a round that waits for `num_members` members (DeltaMean::BeginRound).
  void BeginRound(int num_members);
  // The round's members, their chunks and their mean.
  DeltaMean& deltas() { return deltas_; }
  const DeltaMean& deltas() const { return deltas_; }

  // Steps and encodes every chunk whose mean is now ready and returns their indexes (each
  // once). OUT_OF_RANGE when an update overflows fp32 or does not fit the codec (fp16):
  // abort the round.
  absl::StatusOr<std::vector<int>> TakeCompleted();

  // The encoded update of a finalised chunk.
  const std::string& EncodedUpdate(int chunk) const { return encoded_update_[chunk]; }
  // Moves it out (to send it without a copy); EncodedUpdate(chunk) is empty afterwards.
  std::string TakeEncodedUpdate(int chunk) { return std::move(encoded_update_[chunk]); }
  // Every chunk of the round stepped and encoded.
  bool AllComplete() const { return finalized_ == layout().num_chunks(); }

  // Applies the round's update and advances the optimizer state, into new buffers: what
  // global_buffer() and momentum_buffer() handed out before stays as it was. The next model
  // was written chunk by chunk as the chunks completed; this swaps it in. Requires
  // AllComplete().
  void Commit();
  // Forgets the round; global and optimizer state stay as they were.
  void Abort();

  // The next global model and momentum of the range, computed elsewhere (into buffers from
  // SpareBuffer), become this one's. Sizes must match: the range's, and the momentum's (0
  // without momentum).
  void InstallNext(std::shared_ptr<std::vector<float>> global,
                   std::shared_ptr<std::vector<float>> momentum);
  // A buffer of `size` values that nobody else holds: an old model's when it is free (a
  // fresh model-sized buffer costs a page fault per 4 KiB), else a new one.
  std::shared_ptr<std::vector<float>> SpareBuffer(size_t size);

  absl::Span<const float> global() const { return *global_; }
  // The outer momentum buffer; empty when the outer optimizer has no momentum.
  absl::Span<const float> momentum() const { return *momentum_; }
  // The same, shared: never changed afterwards (Commit and InstallNext replace them).
  std::shared_ptr<const std::vector<float>> global_buffer() const { return global_; }
  // Null when the outer optimizer has no momentum.
  std::shared_ptr<const std::vector<float>> momentum_buffer() const;
  // Puts back a saved momentum buffer (a restarted coordinator). INVALID_ARGUMENT when its
  // size is not the range's (or not 0 without momentum) or it holds NaN/Inf.
  absl::Status RestoreMomentum(std::vector<float> momentum);
  const Options& options() const { return options_; }
  const ChunkLayout& layout() const { return options_.layout; }
  v1::Codec codec() const { return options_.codec; }

 private:
  // Steps chunk `chunk` by its mean: its update, encoded, and its next model and momentum.
  absl::Status Finalize(int chunk);
  // Keeps `buffer` for SpareBuffer.
  void Recycle(std::shared_ptr<std::vector<float>> buffer);

  Options options_;
  DeltaMean deltas_;
  std::shared_ptr<std::vector<float>> global_;
  std::shared_ptr<std::vector<float>> momentum_;  // outer momentum (empty when momentum is 0)
  std::vector<std::shared_ptr<std::vector<float>>> spares_;  // old buffers, maybe still held
  // The round in progress.
  std::vector<float> pending_update_;                // decoded updates of finalised chunks
  std::shared_ptr<std::vector<float>> next_global_;  // global + update, chunk by chunk
  std::shared_ptr<std::vector<float>> pending_momentum_;
  std::vector<std::string> encoded_update_;
  int finalized_ = 0;  // chunks stepped and encoded
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_RANGE_REDUCER_H_
