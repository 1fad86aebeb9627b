#ifndef LOCALSGD_EXCHANGE_SYNC_STREAM_H_
#define LOCALSGD_EXCHANGE_SYNC_STREAM_H_

#include <grpcpp/client_context.h>
#include <grpcpp/support/sync_stream.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "exchange/chunking.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"

namespace localsgd {

// What every member's Sync stream shares, star or sharded: who syncs, the header that opens
// it, the stale-round answer and the delta chunks.

// A Sync refused because its round already committed carries the coordinator's StaleRound
// (the committed round and global step) as a payload of its FAILED_PRECONDITION status.
std::optional<v1::StaleRound> StaleRoundOf(const absl::Status& status);
absl::Status StaleRoundError(const v1::StaleRound& stale, absl::string_view message);
// A Sync whose fragment was not the open round's carries that round's RoundFragment as a
// payload of its status (FAILED_PRECONDITION from the coordinator's refusal, ABORTED when the
// round's header came back with the other fragment).
std::optional<int> RoundFragmentOf(const absl::Status& status);
absl::Status WithRoundFragment(absl::Status status, const v1::RoundFragment& round);

// Who is syncing: the fields of the SyncHeader besides round and vector length.
struct SyncMember {
  std::string run_id;
  std::string member_id;
  v1::Codec codec = v1::CODEC_FP32;
  double weight = 1;
  int num_workers = 1;
  // The member's credential as of now (JoinResponse.member_credential of its latest Join,
  // which changes when it joins again).
  std::function<std::string()> credential;

  std::string CurrentCredential() const { return credential ? credential() : std::string(); }
};

using SyncStream = grpc::ClientReaderWriter<v1::SyncRequest, v1::SyncResponse>;

// Chunk `c` of `layout` of the delta params - global, encoded with `codec`, into `out`.
void EncodeDeltaChunk(v1::Codec codec, const ChunkLayout& layout, int c,
                      absl::Span<const float> params, absl::Span<const float> global,
                      v1::Chunk* out);

// The start of every Sync, star or sharded: writes the member's header (for `round` at `step`,
// carrying `fragment` of `vector_length` values) and reads the coordinator's first answer. On
// anything but a RoundHeader the stream is finished and its error returned (a stale round's
// carrying the StaleRound); on a round of another fragment, ABORTED (this member sits it out).
absl::StatusOr<v1::RoundHeader> BeginSync(SyncStream* stream, grpc::ClientContext* context,
                                          const SyncMember& member, int64_t round, int64_t step,
                                          int fragment, int64_t vector_length);

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_SYNC_STREAM_H_
