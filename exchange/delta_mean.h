#ifndef LOCALSGD_EXCHANGE_DELTA_MEAN_H_
#define LOCALSGD_EXCHANGE_DELTA_MEAN_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "exchange/chunking.h"
#include "proto/localsgd/v1/run_spec.pb.h"

namespace localsgd {

// One round's weighted mean of the members' deltas over one range of the flat vector, chunk by
// chunk in fp32: a shard owner's whole job, and what a star round's RangeReducer steps its
// model by. A chunk is complete once every member still in the round has delivered it; its
// mean (over the weights that reached it) is then ready at once, so it can be sent before
// later chunks arrive. A member dropped mid-round stops being waited for; the chunks it
// already delivered keep its (valid) contribution. It holds no model.
// Thread-compatible: the caller serialises access (Check excepted, which changes nothing).
class DeltaMean {
 public:
  struct Options {
    // Chunks of the range; chunk indexes are relative to the range.
    ChunkLayout layout;
    v1::Codec codec = v1::CODEC_FP32;  // what the members' chunks are encoded with
    // > 1: screen members' deltas (RunSpec.max_delta_norm_ratio); 0: off. With screening on,
    // the deltas are held until every chunk is complete; then a member whose delta norm
    // exceeds this many times the median of the other members' norms is excluded (its weight
    // and values leave every chunk's mean), and only then are the means taken.
    double max_norm_ratio = 0;
    // In (0, 0.5): a coordinate-wise trimmed mean (RunSpec.trimmed_mean_fraction) over the
    // members that count (after screening): per value, the floor(f * n) largest and smallest
    // of the n deltas are left out and the rest averaged by weight. The deltas are held as for
    // screening. 0: the weighted mean.
    double trim_fraction = 0;
  };

  // A member excluded by screening, with its delta norm and the median of the others'.
  struct Exclusion {
    int slot = -1;
    double norm = 0;
    double others_median = 0;
  };

  explicit DeltaMean(Options options);

  // Opens a round that waits for `num_members` members (slots 0..num_members-1).
  void BeginRound(int num_members);
  // Ends the round: every chunk is refused until the next BeginRound.
  void EndRound() { num_members_ = 0; }
  // Sets a slot's weight (finite, > 0) before its chunks arrive.
  absl::Status SetWeight(int slot, double weight);

  // A member's encoded chunk in two steps, so that members' chunks are checked and decoded in
  // parallel: Check, without touching the sums (outside the caller's lock), checks the index,
  // size and values and, for lossy codecs, decodes into `scratch` (fp32 bytes are read where
  // they are); Add, under the lock, adds the chunk Check passed (the same `encoded` and
  // `scratch`) to slot's contribution. INVALID_ARGUMENT for an index out of range, a wrong
  // size or NaN/Inf (Check); for a duplicate, a dropped slot or a slot without weight (Add).
  absl::Status Check(int chunk, absl::string_view encoded, std::vector<float>* scratch) const;
  absl::Status Add(int slot, int chunk, absl::string_view encoded,
                   const std::vector<float>& scratch);

  // Decodes one encoded chunk into `out` (Check for every codec).
  absl::Status DecodeChunk(int chunk, absl::string_view encoded, std::vector<float>* out) const;
  // Adds slot's decoded chunk.
  absl::Status Accumulate(int slot, int chunk, absl::Span<const float> decoded);
  // Adds slot's chunk straight from fp32 bytes that CheckFp32 passed.
  absl::Status AccumulateFp32(int slot, int chunk, absl::string_view bytes);

  // Stops waiting for `slot`.
  void Drop(int slot);
  // Slots not dropped.
  int active_members() const;

  // The chunks complete since the last call (each once), their means now in Mean(chunk).
  // With screening or trimming, none until every chunk is complete.
  std::vector<int> TakeCompleted();
  // The weighted mean of a chunk TakeCompleted returned, in the round's own buffer: the caller
  // may change it (encode it in place) until the next BeginRound.
  absl::Span<float> Mean(int chunk);
  bool AllComplete() const { return completed_ == layout().num_chunks(); }

  // The members screening excluded in this round (each reported once).
  std::vector<Exclusion> TakeExclusions() { return std::move(exclusions_); }

  const Options& options() const { return options_; }
  const ChunkLayout& layout() const { return options_.layout; }
  v1::Codec codec() const { return options_.codec; }

 private:
  // Checks that `slot` may add `values` values to `chunk` and marks it as added.
  absl::Status Admit(int slot, int chunk, size_t values);
  bool Complete(int chunk) const;
  bool screening() const { return options_.max_norm_ratio > 0; }
  bool trimming() const { return options_.trim_fraction > 0; }
  // The deltas are held until every chunk is complete (screening or trimming).
  bool holding() const { return screening() || trimming(); }
  // Adds slot's values of `chunk` to the sum, or holds them.
  void AddValues(int slot, int chunk, const float* values, size_t n, bool from_bytes);
  // Screening: which of `members` (slots) are outliers; records them as exclusions.
  std::vector<bool> Screen(const std::vector<int>& members);
  // Every chunk complete: screens out outliers (when screening) and reduces the held deltas
  // of the members that count into sum_ (weighted, or trimmed).
  void ReduceHeld();
  // sum_ for `counted` slots' held deltas under the trimmed mean: per value, the trimmed
  // weighted mean times its chunk's weight (which the mean divides by).
  void TrimmedSums(const std::vector<int>& counted);

  Options options_;
  int num_members_ = 0;
  std::vector<double> weights_;         // per slot; 0 = not yet known
  std::vector<bool> dropped_;           // per slot
  std::vector<std::vector<bool>> got_;  // [chunk][slot]
  std::vector<double> chunk_weight_;    // per chunk: weights summed so far
  std::vector<bool> taken_;             // per chunk: its mean was taken
  std::vector<float> sum_;              // weighted deltas summed; a taken chunk's mean
  int completed_ = 0;
  // Holding only: each slot's delta as it arrives, its squared norm, the verdicts.
  std::vector<std::vector<float>> held_;
  std::vector<double> norm2_;
  bool reduced_ = false;
  std::vector<Exclusion> exclusions_;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_DELTA_MEAN_H_
