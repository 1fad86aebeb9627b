#ifndef LOCALSGD_EXCHANGE_MODEL_FETCHER_H_
#define LOCALSGD_EXCHANGE_MODEL_FETCHER_H_

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "exchange/model_client.h"

namespace localsgd {

// How a node leader (or an operator) gets the run's committed model (docs/design.md, "Where
// the model lives"): the coordinator names the node leaders that hold it and its digest; the
// model's chunks come from up to kMaxSources of them in parallel, each range from one holder
// (DataPlane.FetchRange; when it fails, from the next), and the whole is checked against the
// digest, so no holder is trusted (when it does not match, the whole from each holder alone).
// With no holder that serves it, it comes from the run's newest checkpoint when that is of
// the same round and readable here (checked against the digest too), else from the coordinator
// (ModelClient::FetchModel), which keeps a star run's model and says where a sharded run's is.
// Thread-safe.
class ModelFetcher {
 public:
  static constexpr int kMaxSources = 4;
  // Tries from the holders, asking the coordinator anew each time (they move on to newer rounds).
  static constexpr int kAttempts = 3;

  struct Options {
    ModelClient* coordinator = nullptr;  // outlives the fetcher
    std::string token;
    // For the holders' data planes (the same TLS as for the coordinator); null: plaintext.
    std::shared_ptr<grpc::ChannelCredentials> peer_credentials;
    // This node leader: never a source of its own fetch.
    std::string member_id;
  };
  explicit ModelFetcher(Options options) : options_(std::move(options)) {}

  struct Fetched {
    ModelClient::Model model;
    // Where it came from: the holders' member ids, "checkpoint PATH", or "the coordinator".
    std::string source;
  };
  // The committed model of `run_id` (empty: the active run), with the outer momentum when
  // `include_momentum`.
  absl::StatusOr<Fetched> Fetch(const std::string& run_id, absl::Duration timeout,
                                bool include_momentum) const;

 private:
  // The model of `header` from its holders into `out` (its buffers reused); an error names the
  // holders that failed, or says that the bytes do not match the digest.
  absl::Status FromHolders(const v1::ModelHeader& header, absl::Duration timeout,
                           bool include_momentum, Fetched* out) const;
  // The model of `header` from its checkpoint (ModelHeader.checkpoint_path): NOT_FOUND when it
  // names none of that round, else the file's error or DATA_LOSS when it does not match.
  static absl::Status FromCheckpoint(const v1::ModelHeader& header, bool include_momentum,
                                     Fetched* out);

  const Options options_;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_MODEL_FETCHER_H_
