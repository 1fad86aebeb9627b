#ifndef LOCALSGD_EXCHANGE_CODEC_H_
#define LOCALSGD_EXCHANGE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/localsgd/v1/run_spec.pb.h"

namespace localsgd {

// Codecs for parameter deltas and updates (see v1::Codec). Each encodes one chunk on its own:
//   fp32: the values as little-endian floats (exact);
//   bf16: the top 16 bits, rounded to nearest even (relative error <= 2^-8);
//   fp16: IEEE half precision, rounded to nearest even (overflow becomes infinity, which
//         Decode refuses);
//   int8: per block of kInt8BlockValues values, one fp32 scale (absmax / 127), then one int8
//         per value: |error| <= scale / 2.
// The loops run over contiguous memory and vectorise (int8's encoder with SSE2 intrinsics);
// bench/codec_bench measures them. Thread-safe (no state).

// Bytes that `num_values` values take under `codec`. CODEC_UNSPECIFIED means fp32.
size_t EncodedBytes(v1::Codec codec, int64_t num_values);

// Replaces `out` with the encoding of `values`.
void Encode(v1::Codec codec, absl::Span<const float> values, std::string* out);

// Replaces `out` with the encoding of `update` (chunk `chunk` of a round's update, which every
// member applies): with a lossy codec `update` then holds what `out` decodes to, so that
// whoever applies it applies exactly those values. OUT_OF_RANGE naming the chunk when a value
// does not fit the codec (fp16 beyond 65504).
absl::Status EncodeUpdate(v1::Codec codec, int chunk, absl::Span<float> update, std::string* out);

// Replaces `out` with the encoding of a - b (same length): the delta of a chunk, without a
// separate pass to compute it.
void EncodeDifference(v1::Codec codec, absl::Span<const float> a, absl::Span<const float> b,
                      std::string* out);

// Decodes `bytes` into exactly `out.size()` values. INVALID_ARGUMENT when the size is wrong,
// the codec is unknown, or a decoded value is NaN or infinite (nothing is trusted from the
// wire); `out` is then unspecified.
absl::Status Decode(v1::Codec codec, absl::string_view bytes, absl::Span<float> out);

// For fp32 bytes that are used in place: checks the size for `n` values and that none is NaN
// or infinite, like Decode, without copying.
absl::Status CheckFp32(absl::string_view bytes, size_t n);

// Whether every value is finite.
bool AllFinite(absl::Span<const float> values);

// Short lower-case name: "fp32", "bf16", "fp16", "int8".
std::string CodecName(v1::Codec codec);

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_CODEC_H_
