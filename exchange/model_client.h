#ifndef LOCALSGD_EXCHANGE_MODEL_CLIENT_H_
#define LOCALSGD_EXCHANGE_MODEL_CLIENT_H_

#include <grpcpp/channel.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "exchange/chunking.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"

namespace localsgd {

// The run's global model on the coordinator's Averaging service, on flat float vectors (no
// LibTorch): the first leader's upload of global[0], and fetching the committed model (a
// leader that starts, takes over or missed a round; the operator's CLI).
// Thread-safe (each call has its own stream).
class ModelClient {
 public:
  ModelClient(std::shared_ptr<grpc::Channel> channel, std::string token);

  // A node leader's checkpoint offered as the run's model (docs/design.md, "Checkpoints"): the
  // committed round and global step its values are of, and its outer momentum (empty without).
  struct Checkpoint {
    int64_t round = 0;
    int64_t global_step = 0;
    absl::Span<const float> momentum;
  };
  // Uploads global[0] in fp32 chunks of `layout` (or, given `checkpoint`, that checkpoint's
  // values and momentum), as node leader `member_id` with its `credential`: the round and global
  // step it is the model of. ALREADY_EXISTS when another leader was first (or the coordinator
  // keeps a model it does not replace with the checkpoint).
  absl::StatusOr<v1::InitModelResponse> InitModel(const std::string& run_id,
                                                  const std::string& member_id,
                                                  const std::string& credential,
                                                  absl::Span<const float> values,
                                                  const ChunkLayout& layout, absl::Duration timeout,
                                                  const Checkpoint* checkpoint = nullptr);

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
  // The committed model's header alone, with its digest and the node leaders that hold it
  // (FetchModelRequest.holders_only).
  absl::StatusOr<v1::ModelHeader> FetchHolders(const std::string& run_id, absl::Duration timeout,
                                               bool include_momentum);

 private:
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const;

  std::unique_ptr<v1::Averaging::Stub> stub_;
  const std::string token_;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_MODEL_CLIENT_H_
