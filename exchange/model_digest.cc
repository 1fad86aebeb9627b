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

namespace {

// Deals the words of [p, p + n) to `lanes` from lane `*next` on (portably); `crc_word` and
// `crc_byte` advance one lane's CRC.
template <typename CrcWord, typename CrcByte>
inline void DealWords(uint32_t* lanes, int* next, const unsigned char* p, size_t n,
                      CrcWord crc_word, CrcByte crc_byte) {
  auto word_at = [](const unsigned char* q) {
    uint64_t word;
    std::memcpy(&word, q, sizeof(word));
    return word;
  };
  for (; n >= 8 && *next != 0; p += 8, n -= 8) {
    lanes[*next] = crc_word(lanes[*next], word_at(p));
    *next = (*next + 1) % 3;
  }
  uint32_t a = lanes[0], b = lanes[1], c = lanes[2];
  for (; n >= 24; p += 24, n -= 24) {
    a = crc_word(a, word_at(p));
    b = crc_word(b, word_at(p + 8));
    c = crc_word(c, word_at(p + 16));
  }
  lanes[0] = a;
  lanes[1] = b;
  lanes[2] = c;
  for (; n >= 8; p += 8, n -= 8) {
    lanes[*next] = crc_word(lanes[*next], word_at(p));
    *next = (*next + 1) % 3;
  }
  for (; n > 0; ++p, --n) lanes[*next] = crc_byte(lanes[*next], *p);
}

// The same dealing with the CPU's CRC-32C instruction, written out: a generic loop compiled
// without SSE 4.2 could not inline it.
__attribute__((target("sse4.2"))) void DealHardware(uint32_t* lanes, int* next,
                                                    const unsigned char* p, size_t n) {
  auto word_at = [](const unsigned char* q) {
    uint64_t word;
    std::memcpy(&word, q, sizeof(word));
    return word;
  };
  for (; n >= 8 && *next != 0; p += 8, n -= 8) {
    lanes[*next] = static_cast<uint32_t>(_mm_crc32_u64(lanes[*next], word_at(p)));
    *next = (*next + 1) % 3;
  }
  uint64_t a = lanes[0], b = lanes[1], c = lanes[2];
  for (; n >= 24; p += 24, n -= 24) {
    a = _mm_crc32_u64(a, word_at(p));
    b = _mm_crc32_u64(b, word_at(p + 8));
    c = _mm_crc32_u64(c, word_at(p + 16));
  }
  lanes[0] = static_cast<uint32_t>(a);
  lanes[1] = static_cast<uint32_t>(b);
  lanes[2] = static_cast<uint32_t>(c);
  for (; n >= 8; p += 8, n -= 8) {
    lanes[*next] = static_cast<uint32_t>(_mm_crc32_u64(lanes[*next], word_at(p)));
    *next = (*next + 1) % 3;
  }
  for (; n > 0; ++p, --n) lanes[*next] = _mm_crc32_u8(lanes[*next], *p);
}

void DealPortable(uint32_t* lanes, int* next, const unsigned char* p, size_t n) {
  DealWords(
      lanes, next, p, n,
      [](uint32_t crc, uint64_t word) {
        unsigned char bytes[8];
        std::memcpy(bytes, &word, sizeof(bytes));
        return Portable(bytes, sizeof(bytes), crc);
      },
      [](uint32_t crc, unsigned char byte) { return Portable(&byte, 1, crc); });
}

}  // namespace

void LaneCrc::Update(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  if (kHardware) {
    DealHardware(lanes_, &next_, p, size);
  } else {
    DealPortable(lanes_, &next_, p, size);
  }
}

uint64_t LaneCrc::Digest() const {
  // Each step a bijection of the lane it takes in, the others fixed.
  uint64_t digest = Mix(lanes_[0]);
  digest = Mix(digest ^ (uint64_t{lanes_[1]} << 32));
  return Mix(digest ^ lanes_[2]);
}

DigestPair ChunkDigest(const LaneCrc& values, const LaneCrc& momentum) {
  static const uint64_t kNoMomentum = Mix(LaneCrc().Digest());
  return {Mix(values.Digest() ^ Mix(momentum.Digest())), Mix(values.Digest() ^ kNoMomentum)};
}

DigestPair ChunkDigest(absl::Span<const float> next_global, absl::Span<const float> next_momentum) {
  LaneCrc global;
  global.Update(next_global.data(), next_global.size() * sizeof(float));
  LaneCrc momentum;
  momentum.Update(next_momentum.data(), next_momentum.size() * sizeof(float));
  return ChunkDigest(global, momentum);
}

std::optional<DigestPair> NextChunkDigest(const OuterOptimizer& outer, absl::Span<const float> mean,
                                          absl::Span<const float> global,
                                          absl::Span<const float> momentum) {
  constexpr size_t kBlock = 1024;  // whole 8-byte words, as LaneCrc's pieces must be
  std::array<float, kBlock> next;
  std::array<float, kBlock> next_momentum;
  const bool has_momentum = outer.momentum != 0;
  LaneCrc global_crc;
  LaneCrc momentum_crc;
  for (size_t begin = 0; begin < global.size(); begin += kBlock) {
    const size_t n = std::min(kBlock, global.size() - begin);
    std::memcpy(next.data(), mean.data() + begin, n * sizeof(float));
    if (!OuterStepInto(
            outer, absl::MakeSpan(next.data(), n), global.subspan(begin, n),
            has_momentum ? momentum.subspan(begin, n) : absl::Span<const float>(),
            has_momentum ? absl::MakeSpan(next_momentum.data(), n) : absl::Span<float>())) {
      return std::nullopt;
    }
    global_crc.Update(next.data(), n * sizeof(float));
    if (has_momentum) momentum_crc.Update(next_momentum.data(), n * sizeof(float));
  }
  return ChunkDigest(global_crc, momentum_crc);
}

DigestPair RangeDigests::Of(int begin, int end) const {
  DigestPair digest;
  for (int c = begin; c < end; ++c) {
    const uint64_t index = Mix(static_cast<uint64_t>(first_chunk_ + c));
    const DigestPair& chunk = chunks_[static_cast<size_t>(c)];
    digest = Combine(digest, {Mix(index ^ chunk.with_momentum), Mix(index ^ chunk.values)});
  }
  return digest;
}

DigestPair ModelDigest(absl::Span<const float> values, absl::Span<const float> momentum,
                       const ChunkLayout& layout, int first_chunk) {
  RangeDigests digests(layout.num_chunks(), first_chunk);
  for (int c = 0; c < layout.num_chunks(); ++c) {
    const size_t begin = static_cast<size_t>(layout.begin(c));
    const size_t size = static_cast<size_t>(layout.size(c));
    digests.Set(c, ChunkDigest(values.subspan(begin, size),
                               momentum.empty() ? momentum : momentum.subspan(begin, size)));
  }
  return digests.Of(0, layout.num_chunks());
}

}  // namespace localsgd
