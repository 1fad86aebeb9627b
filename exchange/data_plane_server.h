#ifndef LOCALSGD_EXCHANGE_DATA_PLANE_SERVER_H_
#define LOCALSGD_EXCHANGE_DATA_PLANE_SERVER_H_

#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/tls.h"
#include "exchange/ring_inbox.h"
#include "exchange/shard_owner.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"

namespace localsgd {

// A node leader's sharded data plane (docs/design.md, "Sharded rounds"): a gRPC server on its
// own port serving DataPlane.Reduce over a ShardOwner, with the coordinator's rules: TLS or
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
  DataPlaneServer() = default;

  ShardOwner owner_;
  RingInbox inbox_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_DATA_PLANE_SERVER_H_
