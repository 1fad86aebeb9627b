#include "exchange/codec.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "exchange/chunking.h"
#include "exchange/float_bits.h"

namespace localsgd {
namespace {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline uint16_t FloatToBf16(float f) {
  const uint32_t x = Bits(f);
  // Both results, then a select rather than a branch, so that loops over it vectorise.
  const uint32_t nan = (x >> 16) | 0x40u;                           // quiet, sign and payload kept
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;  // to nearest even
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

inline float Bf16ToFloat(uint16_t h) { return FromBits(static_cast<uint32_t>(h) << 16); }

inline uint16_t FloatToFp16(float f) {
  uint32_t x = Bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (x < 0x38800000u) {
    // Subnormal half (or zero): scale so that one unit is the smallest subnormal, and let the
    // FPU round to nearest even.
    return static_cast<uint16_t>(sign |
                                 static_cast<uint32_t>(std::nearbyint(FromBits(x) * 16777216.0f)));
  }
  const uint32_t mantissa_odd = (x >> 13) & 1u;
  x += 0xc8000fffu + mantissa_odd;  // rebias the exponent (127 -> 15) and round to nearest even
  return static_cast<uint16_t>(sign | (x >> 13));
}

inline float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    float value = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign != 0 ? -value : value;
  }
  if (exponent == 31) return FromBits(sign | 0x7f800000u | (mantissa << 13));
  return FromBits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Rounds |x| < 2^22 to the nearest integer, ties to even, in the FPU's default mode: adding
// and subtracting 1.5 * 2^23 leaves no fraction bits. Unlike std::nearbyint this vectorises
// on baseline x86-64 (no SSE4.1 round instruction, so nearbyint is a libm call per value).
// (IEEE semantics, which this project never relaxes with -ffast-math, forbid folding it.)
inline float RoundToNearestEven(float x) {
  constexpr float kMagic = 12582912.0f;
  return (x + kMagic) - kMagic;
}

int64_t Int8Blocks(int64_t n) { return (n + kInt8BlockValues - 1) / kInt8BlockValues; }

// The processor's half-precision conversions (F16C: every x86-64 CPU since 2012), which
// round to nearest even exactly like FloatToFp16, 8 values per instruction.
// Asked through cpuid (clang's __builtin_cpu_supports does not know "f16c"): AVX and F16C,
// and an OS that saves the YMM registers (OSXSAVE, XCR0 bits 1-2).
bool HasF16c() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    constexpr unsigned kOsxsave = 1u << 27, kAvx = 1u << 28, kF16c = 1u << 29;
    if ((ecx & (kOsxsave | kAvx | kF16c)) != (kOsxsave | kAvx | kF16c)) return false;
    unsigned xcr0_low = 0, xcr0_high = 0;
    __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    return (xcr0_low & 6u) == 6u;
  }();
  return has;
}

// The value that position i of an encoding holds: a[i], or a[i] - b[i] for a difference.
template <bool kDifference>
inline float ValueAt(const float* a, const float* b, size_t i) {
  if constexpr (kDifference) {
    return a[i] - b[i];
  } else {
    return a[i];
  }
}

template <bool kDifference>
__attribute__((target("avx,f16c"))) void EncodeFp16F16c(size_t n, const float* __restrict a,
                                                        const float* __restrict b,
                                                        char* __restrict data) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(a + i);
    if constexpr (kDifference) v = _mm256_sub_ps(v, _mm256_loadu_ps(b + i));
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(data + 2 * i), h);
  }
  for (; i < n; ++i) {
    const uint16_t h = FloatToFp16(ValueAt<kDifference>(a, b, i));
    std::memcpy(data + 2 * i, &h, 2);
  }
}

__attribute__((target("avx,f16c"))) void DecodeFp16F16c(const char* data, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 2 * i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, data + 2 * i, 2);
    out[i] = Fp16ToFloat(h);
  }
}

// The scale of one int8 block [begin, end) of ValueAt<kDifference>(a, b, i), and the factor
// that maps its values onto [-127, 127].
struct Int8Scale {
  float scale;
  float inverse;
};

template <bool kDifference>
inline __m128 Load4(const float* a, const float* b, size_t i) {
  __m128 v = _mm_loadu_ps(a + i);
  if constexpr (kDifference) v = _mm_sub_ps(v, _mm_loadu_ps(b + i));
  return v;
}

// SSE2 (every x86-64 processor), 4 values at a time: GCC does not vectorise a maximum over
// floats without leave to ignore NaNs and signed zeros, which this project never gives.
template <bool kDifference>
Int8Scale Int8BlockScale(const float* a, const float* b, size_t begin, size_t end) {
  // The largest |v| other than NaN (infinity included), and whether a value is not finite.
  const __m128 magnitude_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  const __m128i exponent_mask = _mm_set1_epi32(0x7f800000);
  __m128 absmax4 = _mm_setzero_ps();
  __m128i bad4 = _mm_setzero_si128();
  size_t i = begin;
  for (; i + 4 <= end; i += 4) {
    const __m128 v = Load4<kDifference>(a, b, i);
    const __m128 magnitude = _mm_and_ps(_mm_and_ps(v, magnitude_mask), _mm_cmpord_ps(v, v));
    absmax4 = _mm_max_ps(absmax4, magnitude);
    const __m128i exponent = _mm_and_si128(_mm_castps_si128(v), exponent_mask);
    bad4 = _mm_or_si128(bad4, _mm_cmpeq_epi32(exponent, exponent_mask));
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, absmax4);
  float absmax = std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
  uint32_t bad = static_cast<uint32_t>(_mm_movemask_epi8(bad4));
  for (; i < end; ++i) {
    const float v = ValueAt<kDifference>(a, b, i);
    absmax = std::max(absmax, std::fabs(v));  // a NaN compares false and is left out
    bad |= NotFinite(v);
  }
  // A NaN or infinity poisons the scale so Decode refuses the block.
  float scale = bad == 0 ? absmax / 127.0f : std::numeric_limits<float>::quiet_NaN();
  // 127 * (absmax / 127) can round up past the largest float (found by the fuzzer): one ulp
  // less keeps every decoded value finite.
  if (std::isinf(scale * 127.0f)) scale = std::nextafter(scale, 0.0f);
  return {scale, absmax > 0 ? 127.0f / absmax : 0.0f};
}

// q[i] = v * inverse clamped to [-127, 127] (a NaN gives -127), rounded to nearest even: 16
// values at a time with SSE2, whose conversion rounds in the FPU's default mode as
// RoundToNearestEven does.
template <bool kDifference>
void Int8Quantize(const float* a, const float* b, size_t begin, size_t end, float inverse,
                  int8_t* __restrict q) {
  const __m128 factor = _mm_set1_ps(inverse);
  const __m128 low = _mm_set1_ps(-127.0f);
  const __m128 high = _mm_set1_ps(127.0f);
  auto quantize4 = [&](size_t i) {
    // max(v, low) and min(v, high) keep the second operand for a NaN, as std::max(low, v) and
    // std::min(high, v) do.
    const __m128 v = _mm_mul_ps(Load4<kDifference>(a, b, i), factor);
    return _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(v, low), high));
  };
  size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m128i low8 = _mm_packs_epi32(quantize4(i), quantize4(i + 4));
    const __m128i high8 = _mm_packs_epi32(quantize4(i + 8), quantize4(i + 12));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(low8, high8));
  }
  for (; i < end; ++i) {
    const float v = std::min(127.0f, std::max(-127.0f, ValueAt<kDifference>(a, b, i) * inverse));
    q[i] = static_cast<int8_t>(RoundToNearestEven(v));
  }
}

// Encodes the n values ValueAt<kDifference>(a, b, i) into `out`. The loops run over raw,
// non-overlapping pointers and branch-free bodies, so that they vectorise.
template <bool kDifference>
void EncodeValues(v1::Codec codec, size_t n, const float* __restrict a, const float* __restrict b,
                  std::string* out) {
  out->resize(EncodedBytes(codec, static_cast<int64_t>(n)));
  char* __restrict data = out->data();
  switch (codec) {
    case v1::CODEC_BF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToBf16(ValueAt<kDifference>(a, b, i));
        std::memcpy(data + 2 * i, &h, 2);
      }
      return;
    case v1::CODEC_FP16:
      if (HasF16c()) {
        EncodeFp16F16c<kDifference>(n, a, b, data);
        return;
      }
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToFp16(ValueAt<kDifference>(a, b, i));
        std::memcpy(data + 2 * i, &h, 2);
      }
      return;
    case v1::CODEC_INT8: {
      const size_t blocks = static_cast<size_t>(Int8Blocks(static_cast<int64_t>(n)));
      int8_t* __restrict q = reinterpret_cast<int8_t*>(data + blocks * sizeof(float));
      for (size_t b_index = 0; b_index < blocks; ++b_index) {
        const size_t begin = b_index * kInt8BlockValues;
        const size_t end = std::min(n, begin + static_cast<size_t>(kInt8BlockValues));
        const Int8Scale block = Int8BlockScale<kDifference>(a, b, begin, end);
        std::memcpy(data + b_index * sizeof(float), &block.scale, sizeof(float));
        Int8Quantize<kDifference>(a, b, begin, end, block.inverse, q);
      }
      return;
    }
    default:
      for (size_t i = 0; i < n; ++i) {
        const float v = ValueAt<kDifference>(a, b, i);
        std::memcpy(data + 4 * i, &v, 4);
      }
      return;
  }
}

}  // namespace

size_t EncodedBytes(v1::Codec codec, int64_t n) {
  switch (codec) {
    case v1::CODEC_BF16:
    case v1::CODEC_FP16:
      return static_cast<size_t>(n) * 2;
    case v1::CODEC_INT8:
      return static_cast<size_t>(Int8Blocks(n)) * sizeof(float) + static_cast<size_t>(n);
    default:
      return static_cast<size_t>(n) * sizeof(float);
  }
}

void Encode(v1::Codec codec, absl::Span<const float> values, std::string* out) {
  if (codec == v1::CODEC_FP32 || codec == v1::CODEC_UNSPECIFIED) {
    out->assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
    return;
  }
  EncodeValues<false>(codec, values.size(), values.data(), nullptr, out);
}

void EncodeDifference(v1::Codec codec, absl::Span<const float> a, absl::Span<const float> b,
                      std::string* out) {
  EncodeValues<true>(codec, a.size(), a.data(), b.data(), out);
}

absl::Status Decode(v1::Codec codec, absl::string_view bytes, absl::Span<float> out) {
  if (!v1::Codec_IsValid(codec)) {
    return absl::InvalidArgumentError(absl::StrCat("codec: unknown codec ", codec));
  }
  const size_t n = out.size();
  const size_t expected = EncodedBytes(codec, static_cast<int64_t>(n));
  if (bytes.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("chunk data: ", bytes.size(),
                                                   " bytes, expected ", expected, " for ", n,
                                                   " values in ", CodecName(codec)));
  }
  const char* __restrict data = bytes.data();
  float* __restrict values = out.data();  // raw, so that the loops vectorise
  switch (codec) {
    case v1::CODEC_BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        values[i] = Bf16ToFloat(h);
      }
      break;
    case v1::CODEC_FP16:
      if (HasF16c()) {
        DecodeFp16F16c(data, n, values);
        break;
      }
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        values[i] = Fp16ToFloat(h);
      }
      break;
    case v1::CODEC_INT8: {
      const int64_t blocks = Int8Blocks(static_cast<int64_t>(n));
      const int8_t* __restrict q = reinterpret_cast<const int8_t*>(data + blocks * sizeof(float));
      for (int64_t b = 0; b < blocks; ++b) {
        float scale;
        std::memcpy(&scale, data + b * sizeof(float), sizeof(float));
        const size_t begin = static_cast<size_t>(b * kInt8BlockValues);
        const size_t end = std::min(n, begin + static_cast<size_t>(kInt8BlockValues));
        for (size_t i = begin; i < end; ++i) values[i] = static_cast<float>(q[i]) * scale;
      }
      break;
    }
    default:
      if (n > 0) std::memcpy(values, data, n * sizeof(float));
      break;
  }
  if (!AllFinite(out)) {
    return absl::InvalidArgumentError("chunk data: decodes to NaN or infinity");
  }
  return absl::OkStatus();
}

absl::Status CheckFp32(absl::string_view bytes, size_t n) {
  if (bytes.size() != n * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat("chunk data: ", bytes.size(),
                                                   " bytes, expected ", n * sizeof(float), " for ",
                                                   n, " values in fp32"));
  }
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, bytes.data() + 4 * i, 4);
    bad |= NotFiniteBits(u);
  }
  if (bad != 0) return absl::InvalidArgumentError("chunk data: decodes to NaN or infinity");
  return absl::OkStatus();
}

bool AllFinite(absl::Span<const float> values) {
  // Branch-free so the loop vectorises: an exponent of all ones means NaN or infinity.
  uint32_t bad = 0;
  for (float v : values) bad |= NotFinite(v);
  return bad == 0;
}

std::string CodecName(v1::Codec codec) {
  switch (codec) {
    case v1::CODEC_BF16:
      return "bf16";
    case v1::CODEC_FP16:
      return "fp16";
    case v1::CODEC_INT8:
      return "int8";
    case v1::CODEC_FP32:
    case v1::CODEC_UNSPECIFIED:
      return "fp32";
    default:
      return absl::StrCat("codec", static_cast<int>(codec));
  }
}

absl::Status EncodeUpdate(v1::Codec codec, int chunk, absl::Span<float> update, std::string* out) {
  out->clear();
  Encode(codec, update, out);
  if (codec == v1::CODEC_FP32) return absl::OkStatus();
  // Fails only when the update does not fit the codec.
  if (!Decode(codec, *out, update).ok()) {
    return absl::OutOfRangeError(
        absl::StrCat("update of chunk ", chunk, " does not fit ", CodecName(codec)));
  }
  return absl::OkStatus();
}

}  // namespace localsgd
