#include "common/codec.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/chunking.h"

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
  uint32_t x = Bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
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
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(FromBits(x) * 16777216.0f)));
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

int64_t Int8Blocks(int64_t n) { return (n + kInt8BlockValues - 1) / kInt8BlockValues; }

void EncodeInt8(absl::Span<const float> values, char* out) {
  const int64_t n = static_cast<int64_t>(values.size());
  const int64_t blocks = Int8Blocks(n);
  int8_t* q = reinterpret_cast<int8_t*>(out + blocks * sizeof(float));
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kInt8BlockValues;
    const int64_t end = std::min(n, begin + kInt8BlockValues);
    float absmax = 0;
    for (int64_t i = begin; i < end; ++i) absmax = std::max(absmax, std::fabs(values[i]));
    // A NaN would vanish in the max above: poison the scale so Decode refuses the block.
    const float scale = AllFinite(values.subspan(begin, end - begin))
                            ? absmax / 127.0f
                            : std::numeric_limits<float>::quiet_NaN();
    std::memcpy(out + b * sizeof(float), &scale, sizeof(float));
    const float inverse = absmax > 0 ? 127.0f / absmax : 0.0f;
    for (int64_t i = begin; i < end; ++i) {
      float v = std::nearbyint(values[i] * inverse);
      v = std::min(127.0f, std::max(-127.0f, v));
      q[i] = static_cast<int8_t>(v);
    }
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
  const size_t n = values.size();
  out->resize(EncodedBytes(codec, static_cast<int64_t>(n)));
  char* data = out->data();
  switch (codec) {
    case v1::CODEC_BF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToBf16(values[i]);
        std::memcpy(data + 2 * i, &h, 2);
      }
      return;
    case v1::CODEC_FP16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToFp16(values[i]);
        std::memcpy(data + 2 * i, &h, 2);
      }
      return;
    case v1::CODEC_INT8:
      EncodeInt8(values, data);
      return;
    default:
      if (n > 0) std::memcpy(data, values.data(), n * sizeof(float));
      return;
  }
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
  const char* data = bytes.data();
  switch (codec) {
    case v1::CODEC_BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        out[i] = Bf16ToFloat(h);
      }
      break;
    case v1::CODEC_FP16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        out[i] = Fp16ToFloat(h);
      }
      break;
    case v1::CODEC_INT8: {
      const int64_t blocks = Int8Blocks(static_cast<int64_t>(n));
      const int8_t* q = reinterpret_cast<const int8_t*>(data + blocks * sizeof(float));
      for (int64_t b = 0; b < blocks; ++b) {
        float scale;
        std::memcpy(&scale, data + b * sizeof(float), sizeof(float));
        const size_t begin = static_cast<size_t>(b * kInt8BlockValues);
        const size_t end = std::min(n, begin + static_cast<size_t>(kInt8BlockValues));
        for (size_t i = begin; i < end; ++i) out[i] = static_cast<float>(q[i]) * scale;
      }
      break;
    }
    default:
      if (n > 0) std::memcpy(out.data(), data, n * sizeof(float));
      break;
  }
  if (!AllFinite(out)) {
    return absl::InvalidArgumentError("chunk data: decodes to NaN or infinity");
  }
  return absl::OkStatus();
}

bool AllFinite(absl::Span<const float> values) {
  // Branch-free so the loop vectorises: an exponent of all ones means NaN or infinity.
  uint32_t bad = 0;
  for (float v : values) bad |= static_cast<uint32_t>((Bits(v) & 0x7f800000u) == 0x7f800000u);
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

}  // namespace localsgd
