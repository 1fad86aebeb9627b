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
#include "exchange/outer_step.h"
#include "proto/localsgd/v1/run_spec.pb.h"

namespace localsgd {

// The range reducer for one range of the flat parameter vector (the whole vector in star
// mode, one shard in the sharded mode). It holds global[r-1] for the range and, during a round,
// sums the members' decoded deltas chunk by chunk in fp32. A chunk is complete once every
// member still in the round has delivered it; its update (weighted mean of the deltas that
// arrived for it, through the outer optimizer) is then encoded at once, so it can be sent
// before later chunks arrive. The update is applied to global (and the optimizer state
// advanced) only on Commit; Abort discards the round.
//
// A member dropped mid-round stops being waited for; the chunks it already delivered keep its
// (valid) contribution, and each chunk's mean is over the weights that reached that chunk.
// Thread-compatible: the caller serialises access.
class RangeReducer {
 public:
  struct Options {
    // Chunks of the range; chunk indexes are relative to the range.
    ChunkLayout layout;
    v1::Codec codec = v1::CODEC_FP32;
    OuterOptimizer outer;
    // > 1: screen members' deltas (RunSpec.max_delta_norm_ratio); 0: off. With screening on,
    // the deltas are held until every chunk is complete; then a member whose delta norm
    // exceeds this many times the median of the other members' norms is excluded (its weight
    // and values leave every chunk's mean), and only then are the chunks finalised.
    double max_norm_ratio = 0;
    // In (0, 0.5): a coordinate-wise trimmed mean (RunSpec.trimmed_mean_fraction) over the
    // members that count (after screening): per value, the floor(f * n) largest and smallest
    // of the n deltas are left out and the rest averaged by weight. The deltas are held as for
    // screening. 0: the weighted mean.
    double trim_fraction = 0;
    // Whether it holds the range's model and applies each round to it (Commit). A shard owner
    // only averages: it neither keeps nor writes a next model.
    bool holds_model = true;
  };

  // A member excluded by screening, with its delta norm and the median of the others'.
  struct Exclusion {
    int slot = -1;
    double norm = 0;
    double others_median = 0;
  };

  // `global` is global[r-1] for the range; its size must be layout.num_values.
  RangeReducer(Options options, std::vector<float> global);

  // Opens a round that waits for `num_members` members (slots 0..num_members-1).
  void BeginRound(int num_members);

  // Sets a slot's weight (finite, > 0) before its chunks arrive.
  absl::Status SetWeight(int slot, double weight);

  // A member's encoded chunk in two steps, so that members' chunks are checked and decoded in
  // parallel: Check, without touching the reducer (outside the caller's lock), checks the
  // index, size and values and, for lossy codecs, decodes into `scratch` (fp32 bytes are
  // read where they are); Add, under the lock, adds the chunk Check passed (the same
  // `encoded` and `scratch`) to slot's contribution. INVALID_ARGUMENT for an index out of
  // range, a wrong size or NaN/Inf (Check); for a duplicate, a dropped slot or a slot without
  // weight (Add). Complete chunks become available through TakeCompleted.
  absl::Status Check(int chunk, absl::string_view encoded, std::vector<float>* scratch) const;
  absl::Status Add(int slot, int chunk, absl::string_view encoded,
                   const std::vector<float>& scratch);

  // Decodes one encoded chunk into `out` (Check for every codec).
  absl::Status DecodeChunk(int chunk, absl::string_view encoded, std::vector<float>* out) const;
  // Adds slot's decoded chunk.
  absl::Status Accumulate(int slot, int chunk, absl::Span<const float> decoded);
  // Adds slot's chunk straight from fp32 bytes (of an fp32 reducer) that CheckFp32 passed.
  absl::Status AccumulateFp32(int slot, int chunk, absl::string_view bytes);

  // Stops waiting for `slot`.
  void Drop(int slot);

  // Finalises every chunk that is now complete and returns their indexes (each once).
  // OUT_OF_RANGE when an update does not fit the codec (fp16 overflow): abort the round.
  // With screening, nothing is finalised until every chunk is complete.
  absl::StatusOr<std::vector<int>> TakeCompleted();

  // The members screening excluded in this round (each reported once).
  std::vector<Exclusion> TakeExclusions() { return std::move(exclusions_); }

  // The encoded update of a finalised chunk.
  const std::string& EncodedUpdate(int chunk) const { return encoded_update_[chunk]; }
  // Moves it out (to send it without a copy); EncodedUpdate(chunk) is empty afterwards.
  std::string TakeEncodedUpdate(int chunk) { return std::move(encoded_update_[chunk]); }

  bool AllComplete() const { return completed_ == layout().num_chunks(); }
  // Slots not dropped.
  int active_members() const;

  // Applies the round's decoded update and advances the optimizer state, into new buffers:
  // what global_buffer() and momentum_buffer() handed out before stays as it was. The next
  // model was written chunk by chunk as the chunks completed; this swaps it in.
  // Requires AllComplete() and holds_model.
  void Commit();
  // Forgets the round; global and optimizer state stay as they were.
  void Abort();

  // Sharded rounds: the next global model and momentum, computed chunk by chunk with
  // OuterStepInto as the averaged chunks arrived (into buffers from SpareBuffer), become this
  // engine's. Sizes must match: the range's, and the momentum's (0 without momentum).
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
  absl::Status Finalize(int chunk);
  // Checks that `slot` may add `values` values to `chunk` and marks it as added.
  absl::Status Admit(int slot, int chunk, size_t values);
  bool Complete(int chunk) const;
  bool screening() const { return options_.max_norm_ratio > 0; }
  bool trimming() const { return options_.trim_fraction > 0; }
  // The deltas are held until every chunk is complete (screening or trimming).
  bool holding() const { return screening() || trimming(); }
  // Adds slot's values of `chunk` to the sum, or holds them.
  void Add(int slot, int chunk, const float* values, size_t n, bool from_bytes);
  // Screening: which of `members` (slots) are outliers; records them as exclusions.
  std::vector<bool> Screen(const std::vector<int>& members);
  // Every chunk complete: screens out outliers (when screening) and reduces the held deltas
  // of the members that count into sum_ (weighted, or trimmed).
  void ReduceHeld();
  // sum_ for `counted` slots' held deltas under the trimmed mean: per value, the trimmed
  // weighted mean times its chunk's weight (which Finalize divides by).
  void TrimmedSums(const std::vector<int>& counted);

  // Keeps `buffer` for SpareBuffer.
  void Recycle(std::shared_ptr<std::vector<float>> buffer);

  Options options_;
  std::shared_ptr<std::vector<float>> global_;
  std::shared_ptr<std::vector<float>> momentum_;  // outer momentum (empty when momentum is 0)
  std::vector<std::shared_ptr<std::vector<float>>> spares_;  // old buffers, maybe still held

  // The round in progress.
  int num_members_ = 0;
  std::vector<double> weights_;                      // per slot; 0 = not yet known
  std::vector<bool> dropped_;                        // per slot
  std::vector<std::vector<bool>> got_;               // [chunk][slot]
  std::vector<double> chunk_weight_;                 // per chunk: weights summed so far
  std::vector<bool> finalized_;                      // per chunk
  std::vector<float> sum_;                           // weighted deltas summed, per value
  std::vector<float> pending_update_;                // decoded updates of finalised chunks
  std::shared_ptr<std::vector<float>> next_global_;  // global + update, chunk by chunk
  std::shared_ptr<std::vector<float>> pending_momentum_;
  std::vector<std::string> encoded_update_;
  int completed_ = 0;
  // Holding only: each slot's delta as it arrives, its squared norm, the verdicts.
  std::vector<std::vector<float>> held_;
  std::vector<double> norm2_;
  bool reduced_ = false;
  std::vector<Exclusion> exclusions_;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_RANGE_REDUCER_H_
