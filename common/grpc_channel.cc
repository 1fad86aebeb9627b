#include "common/grpc_channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

namespace localsgd {

grpc::ChannelArguments StreamingChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20);
  args.SetInt(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 8 << 20);
  args.SetInt(GRPC_ARG_TCP_READ_CHUNK_SIZE, 4 << 20);
  args.SetInt(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 16 << 20);
  // After a coordinator restart or a partition, reconnect with exponential backoff from 0.1 s
  // up to 2 s (gRPC's default goes up to 120 s, far longer than a lease).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // Despite its name this is the least time one connection attempt gets (TCP and the HTTP/2
  // handshake up to the server's SETTINGS frame), not a backoff: 5 s (gRPC's default is 20 s).
  // At 100 ms, as it once was here, attempts made while the links were full (the first sharded
  // round of 8 node leaders on 200 Mbit/s links opens 56 connections at once) timed out and
  // the round aborted.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
  return args;
}

namespace {

class StreamingOptions : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* args) override {
    grpc::ChannelArguments streaming = StreamingChannelArguments();
    grpc_channel_args c_args = streaming.c_channel_args();
    for (size_t i = 0; i < c_args.num_args; ++i) {
      if (c_args.args[i].type == GRPC_ARG_INTEGER) {
        args->SetInt(c_args.args[i].key, c_args.args[i].value.integer);
      }
    }
  }
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*) override {}
};

}  // namespace

void UseStreamingArguments(grpc::ServerBuilder* builder) {
  builder->SetOption(std::make_unique<StreamingOptions>());
}

std::shared_ptr<grpc::Channel> CreateStreamingChannel(
    const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials,
    int connection) {
  grpc::ChannelArguments args = StreamingChannelArguments();
  // gRPC shares a connection between channels whose arguments are equal.
  if (connection != 0) args.SetInt("localsgd.connection", connection);
  return grpc::CreateCustomChannel(address, std::move(credentials), args);
}

}  // namespace localsgd
