#ifndef LOCALSGD_EXCHANGE_STAR_CLIENT_H_
#define LOCALSGD_EXCHANGE_STAR_CLIENT_H_

#include <grpcpp/channel.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "exchange/chunking.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"

namespace localsgd {

// A Sync refused because its round already committed carries the coordinator's StaleRound
// (the committed round and global step) as a payload of its FAILED_PRECONDITION status.
std::optional<v1::StaleRound> StaleRoundOf(const absl::Status& status);
absl::Status StaleRoundError(const v1::StaleRound& stale, absl::string_view message);

// Who is syncing: the fields of the SyncHeader besides round and vector length.
struct SyncMember {
  std::string run_id;
  std::string member_id;
  v1::Codec codec = v1::CODEC_FP32;
  double weight = 1;
  int num_workers = 1;
};

using SyncStream = grpc::ClientReaderWriter<v1::SyncRequest, v1::SyncResponse>;

// Chunk `c` of `layout` of the delta params - global, encoded with `codec`, into `out`.
void EncodeDeltaChunk(v1::Codec codec, const ChunkLayout& layout, int c,
                      absl::Span<const float> params, absl::Span<const float> global,
                      v1::Chunk* out);

// The start of every Sync, star or sharded: writes the member's header and reads the
// coordinator's first answer. On anything but a RoundHeader the stream is finished and its
// error returned (a stale round's carrying the StaleRound).
absl::StatusOr<v1::RoundHeader> BeginSync(SyncStream* stream, grpc::ClientContext* context,
                                          const SyncMember& member, int64_t round, int64_t step,
                                          int64_t vector_length);

// A node leader's side of the Averaging service, on flat float vectors (no LibTorch): the
// initial upload, fetching the global model, and one sync round at a time.
// Thread-safe (each call has its own stream).
class StarClient {
 public:
  StarClient(std::shared_ptr<grpc::Channel> channel, std::string token);

  using Member = SyncMember;

  struct SyncResult {
    int64_t round = 0;
    int64_t global_step = 0;
    std::vector<std::string> members;  // whose deltas are in the update
  };

  // One star round: streams the encoded delta `params - global` chunk by chunk while reading
  // the update chunks, and on commit adds the decoded update to `global` (global[r-1] becomes
  // global[r]). On any error, ABORTED included, `global` is unchanged; a stale round's error
  // carries the StaleRound (StaleRoundOf).
  absl::StatusOr<SyncResult> Sync(const Member& member, int64_t round, int64_t step,
                                  absl::Span<const float> params, absl::Span<float> global,
                                  absl::Duration timeout);

  // Uploads global[0] in fp32 chunks of `layout`. ALREADY_EXISTS when another leader was first.
  absl::Status InitModel(const std::string& run_id, const std::string& member_id,
                         absl::Span<const float> values, const ChunkLayout& layout,
                         absl::Duration timeout);

  struct Model {
    std::string run_id;
    int64_t round = 0;
    int64_t global_step = 0;
    std::vector<float> values;
    // The outer momentum (asked for, and the outer optimizer has momentum); else empty.
    std::vector<float> momentum;
  };
  // The committed global model of `run_id` (empty: the active run), with the outer momentum
  // when `include_momentum`.
  absl::StatusOr<Model> FetchModel(const std::string& run_id, absl::Duration timeout,
                                   bool include_momentum = false);

 private:
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const;

  std::unique_ptr<v1::Averaging::Stub> stub_;
  const std::string token_;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_STAR_CLIENT_H_
