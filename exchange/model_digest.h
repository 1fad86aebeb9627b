#ifndef LOCALSGD_EXCHANGE_MODEL_DIGEST_H_
#define LOCALSGD_EXCHANGE_MODEL_DIGEST_H_

#include <cstddef>
#include <cstdint>
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

// One chunk's digest of global[r] and its outer momentum as they stand after the outer step
// (`next_momentum` empty without one): the values' and the momentum's LaneCrc, mixed.
uint64_t ChunkDigest(absl::Span<const float> next_global, absl::Span<const float> next_momentum);

// The same digest computed from the chunk's mean and its values before the step, changing
// nothing: what a member's copy will be at the commit (OuterStepInto's arithmetic, in blocks).
uint64_t NextChunkDigest(const OuterOptimizer& outer, absl::Span<const float> mean,
                         absl::Span<const float> global, absl::Span<const float> momentum);

// Ranges' digests from their chunks': the chunks may be digested in any order, and a change in
// any one chunk changes its range's digest.
class RangeDigests {
 public:
  explicit RangeDigests(int num_chunks) : chunks_(static_cast<size_t>(num_chunks)) {}
  // Chunk `chunk`'s digest; each chunk once (calls for different chunks may run concurrently).
  void Set(int chunk, uint64_t digest) { chunks_[static_cast<size_t>(chunk)] = digest; }
  // The digest of chunks [begin, end).
  uint64_t Of(int begin, int end) const;

 private:
  std::vector<uint64_t> chunks_;
};

// A whole model's digest (`momentum` empty without one), its chunks cut by `layout`: the
// RangeDigests of every chunk's ChunkDigest. What a model fetched from members is checked
// against (docs/design.md, "Where the model lives").
uint64_t ModelDigest(absl::Span<const float> values, absl::Span<const float> momentum,
                     const ChunkLayout& layout);

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_MODEL_DIGEST_H_
