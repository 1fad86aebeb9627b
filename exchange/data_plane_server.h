#ifndef LOCALSGD_EXCHANGE_DATA_PLANE_SERVER_H_
#define LOCALSGD_EXCHANGE_DATA_PLANE_SERVER_H_

#include <grpcpp/server.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/tls.h"
#include "exchange/held_model.h"
#include "exchange/ring_inbox.h"
#include "exchange/shard_owner.h"
#include "exchange/stream_tag_check.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"

namespace localsgd {

// A node leader's sharded data plane (docs/design.md, "Sharded rounds"): a gRPC server on its
// own port serving DataPlane.Reduce over a ShardOwner, Pass into a RingInbox and FetchRange
// from the node's HeldModel, with the coordinator's rules: TLS or
// mutual TLS when certificates are given, and the bearer token on every call. Reactors never
// block; writes go through a StreamOutbox. Thread-safe.
class DataPlaneServer {
 public:
  struct Options {
    // HOST:PORT to listen on; port 0 picks a free one.
    std::string address = "127.0.0.1:0";
    // Required of every call as "authorization: Bearer <token>"; empty: none.
    std::string token;
    ServerTls tls;
    // The node leader this data plane is for: streams to it must carry the tags the
    // coordinator made under its key (StreamTagCheck); without one every stream is refused.
    std::function<StreamTagCheck::Identity()> identity;
    // The committed model FetchRange serves (it outlives the server); null: none.
    HeldModel* held = nullptr;
  };

  static absl::StatusOr<std::unique_ptr<DataPlaneServer>> Start(Options options);
  ~DataPlaneServer();

  ShardOwner* owner() { return &owner_; }
  // What ring rounds' streams from the member before this one bring.
  RingInbox* inbox() { return &inbox_; }
  // The address it listens on, with the port it got ("127.0.0.1:43127", "0.0.0.0:43127").
  const std::string& address() const { return address_; }
  // Stops serving; open streams end. Idempotent.
  void Shutdown();

 private:
  explicit DataPlaneServer(std::function<StreamTagCheck::Identity()> identity)
      : tags_(std::move(identity)) {}

  ShardOwner owner_;
  RingInbox inbox_;
  const StreamTagCheck tags_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_DATA_PLANE_SERVER_H_
