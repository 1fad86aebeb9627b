#include "exchange/model_digest.h"

#include <nmmintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace localsgd {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78;  // CRC-32C, reflected

struct Table {
  std::array<uint32_t, 256> entries;
  Table() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
      entries[i] = crc;
    }
  }
};

uint32_t Portable(const unsigned char* p, size_t n, uint32_t crc) {
  static const Table table;
  for (size_t i = 0; i < n; ++i) crc = table.entries[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

__attribute__((target("sse4.2"))) uint32_t Hardware(const unsigned char* p, size_t n,
                                                    uint32_t crc) {
  uint64_t c = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof(word));
    c = _mm_crc32_u64(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; ++p, --n) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}

const bool kHardware = __builtin_cpu_supports("sse4.2");

// splitmix64's finaliser: a bijection of 64-bit words.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint32_t Crc32c(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  crc = kHardware ? Hardware(p, size, crc) : Portable(p, size, crc);
  return ~crc;
}

uint64_t ChunkDigest(absl::Span<const float> next_global, absl::Span<const float> next_momentum) {
  const uint64_t global = Crc32c(next_global.data(), next_global.size() * sizeof(float));
  const uint64_t momentum =
      next_momentum.empty() ? 0
                            : Crc32c(next_momentum.data(), next_momentum.size() * sizeof(float));
  return global << 32 | momentum;
}

uint64_t NextChunkDigest(const OuterOptimizer& outer, absl::Span<const float> mean,
                         absl::Span<const float> global, absl::Span<const float> momentum) {
  constexpr size_t kBlock = 1024;
  std::array<float, kBlock> next;
  std::array<float, kBlock> next_momentum;
  const bool has_momentum = outer.momentum != 0;
  uint32_t global_crc = 0;
  uint32_t momentum_crc = 0;
  for (size_t begin = 0; begin < global.size(); begin += kBlock) {
    const size_t n = std::min(kBlock, global.size() - begin);
    std::memcpy(next.data(), mean.data() + begin, n * sizeof(float));
    // Not finite: the coordinator's own step fails too, and the round aborts.
    OuterStepInto(outer, absl::MakeSpan(next.data(), n), global.subspan(begin, n),
                  has_momentum ? momentum.subspan(begin, n) : absl::Span<const float>(),
                  has_momentum ? absl::MakeSpan(next_momentum.data(), n) : absl::Span<float>());
    global_crc = Crc32c(next.data(), n * sizeof(float), global_crc);
    if (has_momentum) momentum_crc = Crc32c(next_momentum.data(), n * sizeof(float), momentum_crc);
  }
  return uint64_t{global_crc} << 32 | momentum_crc;
}

uint64_t RangeDigests::Of(int begin, int end) const {
  uint64_t digest = 0;
  for (int c = begin; c < end; ++c) {
    digest ^= Mix(Mix(static_cast<uint64_t>(c)) ^ chunks_[static_cast<size_t>(c)]);
  }
  return digest;
}

}  // namespace localsgd
