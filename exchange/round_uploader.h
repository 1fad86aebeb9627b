#ifndef LOCALSGD_EXCHANGE_ROUND_UPLOADER_H_
#define LOCALSGD_EXCHANGE_ROUND_UPLOADER_H_

#include <grpcpp/client_context.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/mutex.h"
#include "exchange/model_digest.h"
#include "exchange/shard_owner.h"
#include "exchange/sync_stream.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"

namespace localsgd {

// The one writer of a member's Sync stream once a sharded round's layout is known: its
// "delivered" and its reports of unreachable peers (the coordinator gets no model bytes).
// Producers only queue, so the owner's reactors never block on the coordinator. Thread-safe.
class RoundUploader : public OwnerFailureSink {
 public:
  RoundUploader(SyncStream* stream, grpc::ClientContext* context);
  ~RoundUploader() override;
  RoundUploader(const RoundUploader&) = delete;
  RoundUploader& operator=(const RoundUploader&) = delete;

  // Cancels the stream: the coordinator sees this owner leave and aborts the round.
  void OnFailure(const absl::Status& status) override;
  // Every averaged chunk is here; `range_digests` are this copy's (Delivered), by range.
  void Deliver(std::vector<DigestPair> range_digests);
  // This member's exchange with `peer_id` failed (the coordinator aborts the round).
  void Unreachable(const std::string& peer_id, const absl::Status& why);
  // Sends nothing more; waits for the write in flight.
  void Stop();
  // OnFailure's status, OK if none.
  absl::Status failure();

 private:
  void Run();

  SyncStream* const stream_;
  grpc::ClientContext* const context_;
  Mutex mu_;
  std::deque<std::shared_ptr<const v1::SyncRequest>> reports_ ABSL_GUARDED_BY(mu_);
  std::optional<std::vector<DigestPair>> deliver_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_ROUND_UPLOADER_H_
