// ReceivedChunk::Read on arbitrary bytes in arbitrary slices (what a data-plane port takes
// from the outside): never crashes, and what it reads is what protobuf reads: the bytes after
// the outer tag and length parse as a Chunk with the same index and data, and walking its fp32
// values in runs gives the data's whole values in order.
// Input: byte 0 picks the slice size (1-256), the rest is the message.
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "exchange/received_chunk.h"
#include "proto/localsgd/v1/averaging.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t piece = static_cast<size_t>(data[0]) + 1;
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  grpc::ByteBuffer wire(slices.data(), slices.size());
  std::optional<localsgd::ReceivedChunk> chunk = localsgd::ReceivedChunk::Read(wire);
  if (!chunk.has_value()) return 0;
  std::string read;
  for (absl::string_view p : chunk->data()) read.append(p.data(), p.size());
  if (read.size() != chunk->size()) std::abort();
  // The outer tag and length: the same varints Read skipped.
  size_t pos = 0;
  for (int varint = 0; varint < 2; ++varint) {
    while (pos < bytes.size() && (static_cast<uint8_t>(bytes[pos]) & 0x80) != 0) ++pos;
    ++pos;
  }
  localsgd::v1::Chunk parsed;
  if (pos > bytes.size() || !parsed.ParseFromString(bytes.substr(pos))) std::abort();
  if (parsed.index() != chunk->index() || parsed.data() != read) std::abort();
  std::vector<float> values(chunk->size() / sizeof(float));
  (void)chunk->DecodeFp32(absl::MakeSpan(values));
  // Walked in runs, the whole values are the data's first bytes, in order.
  std::string walked;
  chunk->ForEachFp32Run([&](const char* run, size_t first, size_t n) {
    if (first * sizeof(float) != walked.size() || n == 0) std::abort();
    walked.append(run, n * sizeof(float));
  });
  if (walked != read.substr(0, values.size() * sizeof(float))) std::abort();
  return 0;
}
