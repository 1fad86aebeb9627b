// Codec decoding on arbitrary bytes: never crashes; what decodes is finite and, re-encoded and
// decoded again, comes back unchanged (bit for bit).
// Input: byte 0 picks the codec, bytes 1-2 the number of values, the rest is the encoding.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "exchange/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const localsgd::v1::Codec codecs[] = {localsgd::v1::CODEC_FP32, localsgd::v1::CODEC_BF16,
                                        localsgd::v1::CODEC_FP16, localsgd::v1::CODEC_INT8};
  const localsgd::v1::Codec codec = codecs[data[0] % 4];
  const size_t n = (static_cast<size_t>(data[1]) << 8 | data[2]) % 4096;
  const absl::string_view bytes(reinterpret_cast<const char*>(data + 3), size - 3);
  std::vector<float> values(n);
  const bool fp32_ok = localsgd::CheckFp32(bytes, n).ok();
  if (!localsgd::Decode(codec, bytes, absl::MakeSpan(values)).ok()) {
    if (codec == localsgd::v1::CODEC_FP32 && fp32_ok) std::abort();  // the two checks disagree
    return 0;
  }
  for (float v : values) {
    if (!std::isfinite(v)) std::abort();
  }
  std::string again;
  localsgd::Encode(codec, values, &again);
  std::vector<float> twice(n);
  if (!localsgd::Decode(codec, again, absl::MakeSpan(twice)).ok()) std::abort();
  if (codec != localsgd::v1::CODEC_INT8 &&
      std::memcmp(values.data(), twice.data(), n * sizeof(float)) != 0) {
    std::abort();
  }
  return 0;
}
