#include "exchange/write_batch.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

// For each message: whether it was given the hint (held for the next write).
std::vector<bool> Held(WriteBatch& batch, const std::vector<bool>& more, int64_t bytes) {
  std::vector<bool> held;
  for (bool m : more) held.push_back(batch.Next(bytes, m).get_buffer_hint());
  return held;
}

TEST(WriteBatchTest, TheFirstMessageIsNeverHeld) {
  WriteBatch batch(1000);
  EXPECT_EQ(Held(batch, {true, true, false}, 100), (std::vector<bool>{false, true, false}));
}

TEST(WriteBatchTest, AMessageWithNothingReadyBehindItGoesOutAtOnce) {
  WriteBatch batch(1000);
  EXPECT_EQ(Held(batch, {false, false}, 100), (std::vector<bool>{false, false}));
  // The last of a burst goes out, and with it those held before it.
  EXPECT_EQ(Held(batch, {true, true, false}, 100), (std::vector<bool>{true, true, false}));
}

TEST(WriteBatchTest, AtMostTheBoundIsHeldInARow) {
  WriteBatch batch(350);
  batch.Next(100, false);  // the first message
  // 100 bytes each: three are held (300), the fourth would make 400 and goes out with them.
  EXPECT_EQ(Held(batch, {true, true, true, true, true, true, true, true}, 100),
            (std::vector<bool>{true, true, true, false, true, true, true, false}));
}

TEST(WriteBatchTest, AMessageAsLargeAsTheBoundIsNeverHeld) {
  WriteBatch batch(1 << 20);
  EXPECT_EQ(Held(batch, {true, true}, 1 << 20), (std::vector<bool>{false, false}));
}

// A server stream that answers every call with `kMessages` messages, queued together: each
// written with `more` while another follows, one write at a time (as StreamOutbox does).
constexpr int kMessages = 3;

class BurstReactor : public grpc::ServerGenericBidiReactor {
 public:
  BurstReactor() { WriteNext(); }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    if (sent_ < kMessages) {
      WriteNext();
    } else {
      Finish(grpc::Status::OK);
    }
  }
  void OnDone() override { delete this; }

 private:
  void WriteNext() {
    ++sent_;
    message_ = grpc::ByteBuffer(&payload_, 1);
    StartWrite(&message_, batch_.Next(static_cast<int64_t>(payload_.size()), sent_ < kMessages));
  }

  grpc::Slice payload_{std::string(100, 'x')};
  grpc::ByteBuffer message_;
  WriteBatch batch_;
  int sent_ = 0;
};

class BurstService : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    return new BurstReactor();
  }
};

// The client sends nothing after its call's headers, so nothing else makes the server's
// transport write: every message arrives only if no write waits on the hint for ever.
TEST(WriteBatchTest, AServerStreamsBurstReachesAClientThatSendsNothing) {
  BurstService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&context, "/test.Burst/Answer", &cq);
  auto wait = [&cq] {
    void* tag;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    return ok;
  };
  call->StartCall(nullptr);
  ASSERT_TRUE(wait());
  int received = 0;
  grpc::ByteBuffer message;
  for (;;) {
    call->Read(&message, nullptr);
    if (!wait()) break;
    ++received;
  }
  grpc::Status status;
  call->Finish(&status, nullptr);
  wait();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(received, kMessages);
  server->Shutdown();
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace localsgd
