#ifndef LOCALSGD_COMMON_GRPC_CHANNEL_H_
#define LOCALSGD_COMMON_GRPC_CHANNEL_H_

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>

namespace localsgd {

// Largest gRPC message either side accepts: chunks are at most 16 MiB (RunSpec.chunk_bytes)
// plus their envelope.
inline constexpr int kMaxMessageBytes = 32 << 20;

// Channel arguments for parameter streaming, shared by clients and the server: large messages,
// a deep HTTP/2 receive window (so a stream of MiB chunks is not throttled to the 64 KiB
// default while BDP probing ramps up) and large TCP reads.
grpc::ChannelArguments StreamingChannelArguments();

// Applies StreamingChannelArguments to the server side of every connection of `builder`.
void UseStreamingArguments(grpc::ServerBuilder* builder);

// A channel to `address` with StreamingChannelArguments (plaintext unless `credentials` say
// otherwise; see common/tls.h). Channels to one address share a TCP connection unless their
// `connection` numbers differ (each number, a connection of its own).
std::shared_ptr<grpc::Channel> CreateStreamingChannel(
    const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials(),
    int connection = 0);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_GRPC_CHANNEL_H_
