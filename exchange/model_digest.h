#ifndef LOCALSGD_EXCHANGE_MODEL_DIGEST_H_
#define LOCALSGD_EXCHANGE_MODEL_DIGEST_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "exchange/chunking.h"
#include "exchange/outer_step.h"

namespace localsgd {

// Digests of a sharded round's result (docs/design.md, "Digests"): every copy of global[r]
// (and of the outer momentum) is checked against the others before the round commits.

// CRC-32C (Castagnoli) of `size` bytes, continuing from `crc` (0 to start).
uint32_t Crc32c(const void* data, size_t size, uint32_t crc = 0);

// CRC-32C in three lanes: the 8-byte words it is given are dealt to the lanes in turn (bytes
// after the last whole word go to the next lane), so that three chains run side by side on one
// core, about three times one chain's speed. Data may come in pieces, every piece but the last
// a whole number of words: the same bytes give the same digest however they are cut. A change
// of any byte changes the digest.
class LaneCrc {
 public:
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  uint32_t lanes_[3] = {~0u, ~0u, ~0u};
  int next_ = 0;  // the lane of the next word
};

// A chunk's, range's or model's digests: of its global values and outer momentum together
// (what a round compares), and of its values alone (what a fetch without the momentum is
// checked against). Without outer momentum, the same values' two digests differ only by the
// empty momentum's part, which both include.
struct DigestPair {
  uint64_t with_momentum = 0;
  uint64_t values = 0;
  bool operator==(const DigestPair& other) const {
    return with_momentum == other.with_momentum && values == other.values;
  }
  bool operator!=(const DigestPair& other) const { return !(*this == other); }
};

// What a member delivers for a range whose next copy is not finite (its outer step overflows
// fp32): the round aborts when the members agree on it. A real range's digests are these with
// probability 2^-128.
inline constexpr DigestPair kNotFinite{0, 0};

// One chunk's digests of global[r] and its outer momentum as they stand after the outer step
// (`next_momentum` empty without one): the values' and the momentum's LaneCrc, mixed; the
// values' alone as if the momentum were empty.
DigestPair ChunkDigest(absl::Span<const float> next_global, absl::Span<const float> next_momentum);
// The same from the LaneCrc of the chunk's values and of its momentum (an empty one without),
// for a model read in pieces.
DigestPair ChunkDigest(const LaneCrc& values, const LaneCrc& momentum);

// The same digests computed from the chunk's mean and its values before the step, changing
// nothing: what a member's copy will be at the commit (OuterStepInto's arithmetic, in blocks).
// nullopt when a value of the result is not finite.
std::optional<DigestPair> NextChunkDigest(const OuterOptimizer& outer, absl::Span<const float> mean,
                                          absl::Span<const float> global,
                                          absl::Span<const float> momentum);

// Ranges' digests from their chunks': the chunks may be digested in any order, and a change in
// any one chunk changes its range's digest. The chunks are counted in the whole model: a
// fragment's (RunSpec.fragments) start at its first chunk, so that the fragments' digests
// combine into the model's (Combine) however the model was cut.
class RangeDigests {
 public:
  // Chunks [first_chunk, first_chunk + num_chunks) of the model, set by their index from 0.
  RangeDigests(int num_chunks, int first_chunk)
      : first_chunk_(first_chunk), chunks_(static_cast<size_t>(num_chunks)) {}
  // Chunk `chunk`'s digests; each chunk once (calls for different chunks may run concurrently).
  void Set(int chunk, DigestPair digest) { chunks_[static_cast<size_t>(chunk)] = digest; }
  // The digests of chunks [begin, end).
  DigestPair Of(int begin, int end) const;
  // Disjoint ranges' digests combined: those of their union.
  static DigestPair Combine(DigestPair a, DigestPair b) {
    return {a.with_momentum ^ b.with_momentum, a.values ^ b.values};
  }

 private:
  int first_chunk_;
  std::vector<DigestPair> chunks_;
};

// A whole model's digests (`momentum` empty without one), its chunks cut by `layout`: the
// RangeDigests of every chunk's ChunkDigest. What a model fetched from members is checked
// against (docs/design.md, "Where the model lives"). With `first_chunk`, the values are a
// fragment's, chunks [first_chunk, ...) of the model.
DigestPair ModelDigest(absl::Span<const float> values, absl::Span<const float> momentum,
                       const ChunkLayout& layout, int first_chunk = 0);

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_MODEL_DIGEST_H_
