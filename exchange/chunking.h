#ifndef LOCALSGD_EXCHANGE_CHUNKING_H_
#define LOCALSGD_EXCHANGE_CHUNKING_H_

#include <algorithm>
#include <cstdint>

namespace localsgd {

// Values per int8 block (one fp32 scale each); chunks hold whole blocks so that every codec
// can encode any chunk on its own.
inline constexpr int64_t kInt8BlockValues = 256;

// How a flat vector of `num_values` floats is cut into chunks of `chunk_values` values (the
// last chunk may be shorter). Plain value type.
struct ChunkLayout {
  int64_t num_values = 0;
  int64_t chunk_values = 1;

  // A layout whose chunks carry `chunk_bytes` of fp32 payload, rounded down to whole int8
  // blocks (at least one).
  static ChunkLayout ForBytes(int64_t num_values, int64_t chunk_bytes) {
    int64_t values = chunk_bytes / static_cast<int64_t>(sizeof(float));
    values = std::max<int64_t>(kInt8BlockValues, values / kInt8BlockValues * kInt8BlockValues);
    return ChunkLayout{num_values, values};
  }

  int num_chunks() const {
    return static_cast<int>((num_values + chunk_values - 1) / chunk_values);
  }
  int64_t begin(int chunk) const { return chunk * chunk_values; }
  int64_t end(int chunk) const { return std::min(num_values, begin(chunk) + chunk_values); }
  int64_t size(int chunk) const { return end(chunk) - begin(chunk); }
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_CHUNKING_H_
