#include "exchange/owner_link.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>

#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "exchange/chunk_wire.h"
#include "exchange/write_batch.h"

namespace localsgd {

GrpcOwnerLink::GrpcOwnerLink(std::shared_ptr<grpc::Channel> channel,
                             std::unique_ptr<grpc::ClientContext> context, std::string owner_id,
                             std::string address)
    : channel_(std::move(channel)),
      context_(std::move(context)),
      owner_id_(std::move(owner_id)),
      address_(std::move(address)) {}

void GrpcOwnerLink::Cancel() { context_->TryCancel(); }

absl::Status GrpcOwnerLink::Exchange(const v1::ReduceHeader& header, int begin, int end,
                                     const Encode& encode, const Take& take) {
  // A Reduce stream of raw buffers, so that each delta chunk goes out in the bytes it was
  // encoded into (ChunkMessageBuffer) where the generated stub's serialiser would copy it.
  const grpc::internal::RpcMethod method(kDataPlaneReduceMethod,
                                         grpc::internal::RpcMethod::BIDI_STREAMING, channel_);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> reduce(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel_.get(), method, context_.get()));
  std::thread writer([&] {
    v1::ReduceRequest request;
    *request.mutable_header() = header;
    if (!reduce->Write(SerializedBuffer(request))) return;
    WriteBatch batch;
    for (int c = begin; c < end; ++c) {
      v1::Chunk chunk;
      encode(c, &chunk);
      grpc::ByteBuffer message =
          ChunkMessageBuffer(v1::ReduceRequest::kChunkFieldNumber, std::move(chunk));
      const bool more = c + 1 < end;  // the next is encoded at once
      if (!reduce->Write(message, batch.Next(static_cast<int64_t>(message.Length()), more))) {
        return;
      }
    }
    reduce->WritesDone();
  });
  absl::Status problem;
  grpc::ByteBuffer wire;
  v1::ReduceResponse reply;
  while (problem.ok() && reduce->Read(&wire)) {
    problem = grpc::SerializationTraits<v1::ReduceResponse>::Deserialize(&wire, &reply).ok()
                  ? take(reply.mean())
                  : absl::InternalError(
                        absl::StrCat("owner ", owner_id_, " sent what does not parse as a mean"));
  }
  if (!problem.ok()) context_->TryCancel();
  writer.join();
  const grpc::Status status = reduce->Finish();
  if (!problem.ok()) return problem;
  if (status.ok()) return absl::OkStatus();
  const absl::Status error = FromGrpcStatus(status);
  return absl::Status(error.code(),
                      absl::StrCat("owner ", owner_id_, " at ", address_, ": ", error.message()));
}

// The owner's side of the in-process exchange: the averaged chunks queue here until the
// member's thread takes them.
class LocalOwnerLink::Stream : public ReduceStream {
 public:
  void Enqueue(std::shared_ptr<const OwnerMean> message) override {
    MutexLock lock(&mu_);
    if (!closed_) queue_.push_back(std::move(message));
  }
  void Close(const absl::Status& status) override {
    MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    status_ = status;
  }
  void Flush() override {}
  void Resume() override {}
  // The next averaged chunk; null once the stream is closed and drained.
  std::shared_ptr<const OwnerMean> Next() {
    MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Stream* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->closed_ || !s->queue_.empty(); },
        this));
    if (queue_.empty()) return nullptr;
    std::shared_ptr<const OwnerMean> next = std::move(queue_.front());
    queue_.pop_front();
    return next;
  }
  absl::Status status() {
    MutexLock lock(&mu_);
    return status_;
  }

 private:
  Mutex mu_;
  std::deque<std::shared_ptr<const OwnerMean>> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

LocalOwnerLink::LocalOwnerLink(ShardOwner* owner)
    : owner_(owner), stream_(std::make_shared<Stream>()) {}

void LocalOwnerLink::Cancel() { stream_->Close(absl::CancelledError("the round ended")); }

absl::Status LocalOwnerLink::Exchange(const v1::ReduceHeader& header, int begin, int end,
                                      const Encode& encode, const Take& take) {
  bool waiting = false;
  LOCALSGD_ASSIGN_OR_RETURN(int64_t session, owner_->Attach(header, stream_, &waiting));
  std::thread writer([&] {
    v1::Chunk chunk;
    for (int c = begin; c < end; ++c) {
      encode(c, &chunk);
      if (!owner_->AddChunk(session, chunk).ok()) return;
    }
  });
  absl::Status problem;
  while (std::shared_ptr<const OwnerMean> reply = stream_->Next()) {
    problem = take(reply->message().mean());
    if (!problem.ok()) break;
  }
  if (!problem.ok()) stream_->Close(absl::CancelledError("stopped reading"));
  writer.join();
  owner_->Detach(session);
  if (!problem.ok()) return problem;
  return stream_->status();
}

}  // namespace localsgd
