#include "exchange/data_plane_server.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/byte_buffer.h>

#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/address.h"
#include "common/auth.h"
#include "common/grpc_channel.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "exchange/chunk_wire.h"
#include "exchange/received_chunk.h"
#include "exchange/stream_outbox.h"
#include "exchange/stream_tag_check.h"
#include "exchange/write_batch.h"

namespace localsgd {
namespace {

// The raw form of DataPlane.Reduce: requests are parsed here, and each response goes out in
// the bytes of the OwnerMean every member shares (ChunkMessageBuffer: no copy).
using ReduceReactorBase = grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;

// The ReduceStream side of a Reduce call: messages go out through an outbox into the reactor.
// Resume may come from another thread at any time, so it and OnDone meet under a lock.
class ReduceStreamAdapter : public ReduceStream {
 public:
  ReduceStreamAdapter(ReduceReactorBase* reactor, grpc::ByteBuffer* request)
      : reactor_(reactor),
        request_(request),
        outbox_(
            [this, reactor](const std::shared_ptr<const OwnerMean>& m, bool more) {
              // One write in flight at a time (the outbox's rule): this buffer and the batch
              // are its own.
              in_flight_ =
                  ChunkMessageBuffer(v1::ReduceResponse::kMeanFieldNumber, m->message().mean(), m);
              reactor->StartWrite(&in_flight_,
                                  batch_.Next(static_cast<int64_t>(in_flight_.Length()), more));
            },
            [reactor](const grpc::Status& s) { reactor->Finish(s); }) {}

  void Enqueue(std::shared_ptr<const OwnerMean> message) override {
    outbox_.Enqueue(std::move(message));
  }
  void Close(const absl::Status& status) override {
    {
      MutexLock lock(&mu_);
      closed_ = true;
    }
    outbox_.Close(ToGrpcStatus(status));
  }
  void Flush() override { outbox_.Flush(); }
  void Resume() override {
    ReduceReactorBase* reactor;
    {
      MutexLock lock(&mu_);
      if (reactor_ == nullptr || closed_) return;
      reactor = reactor_;
      ++resuming_;  // Done waits: the reactor stays alive until StartRead returns
    }
    // Not under the lock: gRPC may run OnReadDone inline, which can Close this stream.
    reactor->StartRead(request_);
    MutexLock lock(&mu_);
    --resuming_;
  }
  // The reactor is going away: no more reads (waits for a Resume in progress).
  void Done() {
    MutexLock lock(&mu_);
    reactor_ = nullptr;
    mu_.Await(absl::Condition(
        +[](int* resuming) { return *resuming == 0; }, &resuming_));
  }
  StreamOutbox<OwnerMean>& outbox() { return outbox_; }

 private:
  Mutex mu_;
  ReduceReactorBase* reactor_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer* const request_;
  grpc::ByteBuffer in_flight_;
  WriteBatch batch_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int resuming_ ABSL_GUARDED_BY(mu_) = 0;
  StreamOutbox<OwnerMean> outbox_;
};

// One member's Reduce call: the header, then the chunks, handed to the owner.
class ReduceReactor : public ReduceReactorBase {
 public:
  ReduceReactor(ShardOwner* owner, const StreamTagCheck* tags, const absl::Status& auth)
      : owner_(owner), tags_(tags), stream_(std::make_shared<ReduceStreamAdapter>(this, &wire_)) {
    if (!auth.ok()) {
      End(auth);
      return;
    }
    StartRead(&wire_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The member finished sending (the owner ends the stream once the range is averaged),
      // or went away before its header.
      if (session_ == 0) End(absl::InvalidArgumentError("the stream ended before a header"));
      return;
    }
    if (!grpc::SerializationTraits<v1::ReduceRequest>::Deserialize(&wire_, &request_).ok()) {
      End(absl::InvalidArgumentError("a request that does not parse as a ReduceRequest"));
      return;
    }
    if (session_ == 0) {
      if (!request_.has_header()) {
        End(absl::InvalidArgumentError("the first message must be a header"));
        return;
      }
      if (absl::Status s = tags_->Check(request_.header()); !s.ok()) {
        End(s);
        return;
      }
      bool waiting = false;
      absl::StatusOr<int64_t> session = owner_->Attach(request_.header(), stream_, &waiting);
      if (!session.ok()) {
        End(session.status());
        return;
      }
      session_ = *session;
      if (waiting) return;  // Resume reads on once the layout is known
    } else if (!request_.has_chunk()) {
      End(absl::InvalidArgumentError("header sent twice; only chunks may follow it"));
      return;
    } else if (absl::Status s = owner_->AddChunk(session_, request_.chunk()); !s.ok()) {
      End(s);
      return;
    }
    StartRead(&wire_);
  }

  void OnWriteDone(bool ok) override { stream_->outbox().OnWriteDone(ok); }

  void OnCancel() override {
    if (session_ != 0) owner_->Detach(session_);
    stream_->outbox().Abandon(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    stream_->Done();
    delete this;
  }

 private:
  void End(const absl::Status& status) {
    if (session_ != 0) owner_->Detach(session_);
    stream_->Close(status);
    stream_->Flush();
  }

  ShardOwner* const owner_;
  const StreamTagCheck* const tags_;
  grpc::ByteBuffer wire_;      // the request as read
  v1::ReduceRequest request_;  // ... and parsed
  const std::shared_ptr<ReduceStreamAdapter> stream_;
  int64_t session_ = 0;
};

// A ring round's stream from the member before this one (DataPlane.Pass): the header, then
// each message handed to the inbox as it arrives; always reading on (a sender sends at most
// about one model's bytes a round), so the sender never waits on this member's round. Raw
// buffers: a sum or a mean is read where gRPC received it (ReceivedChunk), not copied out by
// a typed parse (docs/design.md, "Copies").
class PassReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  PassReactor(RingInbox* inbox, const StreamTagCheck* tags, const absl::Status& auth,
              grpc::ByteBuffer* response)
      : inbox_(inbox), tags_(tags) {
    *response = SerializedBuffer(v1::PassResponse());  // the answer, once the stream ended
    if (!auth.ok()) {
      Finish(ToGrpcStatus(auth));
      return;
    }
    StartRead(&wire_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The sender finished, or the stream broke: then the member sees what is missing.
      if (id_ == 0) {
        Finish(ToGrpcStatus(absl::InvalidArgumentError("the stream ended before a header")));
        return;
      }
      inbox_->Close(id_, absl::OkStatus());
      Finish(grpc::Status::OK);
      return;
    }
    absl::Status status = id_ == 0 ? Open() : Add();
    if (!status.ok()) {
      if (id_ != 0) inbox_->Close(id_, status);
      Finish(ToGrpcStatus(status));
      return;
    }
    wire_.Clear();
    StartRead(&wire_);
  }

  void OnCancel() override {
    if (id_ != 0) inbox_->Close(id_, absl::CancelledError("the member before this one left"));
  }

  void OnDone() override { delete this; }

 private:
  // The first message: the header.
  absl::Status Open() {
    v1::PassRequest request;
    if (!grpc::SerializationTraits<v1::PassRequest>::Deserialize(&wire_, &request).ok()) {
      return absl::InvalidArgumentError("the first message does not parse as a PassRequest");
    }
    if (!request.has_header()) {
      return absl::InvalidArgumentError("the first message must be a header");
    }
    LOCALSGD_RETURN_IF_ERROR(tags_->Check(request.header()));
    LOCALSGD_ASSIGN_OR_RETURN(id_, inbox_->Open(request.header()));
    return absl::OkStatus();
  }

  // A sum or a mean, read in place when it is in the form senders write, else parsed.
  absl::Status Add() {
    std::optional<ReceivedChunk> chunk = ReceivedChunk::Read(wire_);
    if (!chunk.has_value() || (chunk->field() != v1::PassRequest::kSumFieldNumber &&
                               chunk->field() != v1::PassRequest::kMeanFieldNumber)) {
      v1::PassRequest request;
      if (!grpc::SerializationTraits<v1::PassRequest>::Deserialize(&wire_, &request).ok()) {
        return absl::InvalidArgumentError("a message does not parse as a PassRequest");
      }
      switch (request.kind_case()) {
        case v1::PassRequest::kSum:
          chunk = ReceivedChunk::Of(v1::PassRequest::kSumFieldNumber,
                                    std::move(*request.mutable_sum()));
          break;
        case v1::PassRequest::kMean:
          chunk = ReceivedChunk::Of(v1::PassRequest::kMeanFieldNumber,
                                    std::move(*request.mutable_mean()));
          break;
        case v1::PassRequest::kHeader:
          return absl::InvalidArgumentError("header sent twice; only sums and means may follow it");
        default:
          return absl::InvalidArgumentError("a message with neither a sum nor a mean");
      }
    }
    return inbox_->Add(id_, std::move(*chunk));
  }

  RingInbox* const inbox_;
  const StreamTagCheck* const tags_;
  grpc::ByteBuffer wire_;
  int64_t id_ = 0;
};

// FetchRange: the header, then the range's chunks of the model and of its momentum, each
// copied out under a lease of the held model as it goes (one chunk in flight): the stream
// carries the round it began with even when the node commits the next one meanwhile.
class FetchRangeReactor : public grpc::ServerWriteReactor<v1::FetchModelResponse> {
 public:
  FetchRangeReactor(HeldModel* held, const v1::FetchRangeRequest& request, const absl::Status& auth)
      : held_(held), request_(request) {
    if (absl::Status s = auth.ok() ? Begin() : auth; !s.ok()) {
      Finish(ToGrpcStatus(s));
      return;
    }
    StartWrite(&message_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(ToGrpcStatus(absl::CancelledError("write failed")));
      return;
    }
    // The model's chunks, then the momentum's.
    const bool momentum = values_read_;
    v1::Chunk* chunk = momentum ? message_.mutable_momentum() : message_.mutable_chunk();
    absl::StatusOr<int> index = held_->Read(lease_, momentum, chunk->mutable_data());
    if (absl::IsOutOfRange(index.status())) {
      if (!momentum && has_momentum_) {
        values_read_ = true;
        OnWriteDone(true);
      } else {
        Finish(grpc::Status::OK);
      }
      return;
    }
    if (!index.ok()) {
      Finish(ToGrpcStatus(index.status()));
      return;
    }
    chunk->set_index(*index);
    StartWrite(&message_);
  }

  void OnDone() override {
    if (lease_ != 0) held_->Close(lease_);
    delete this;
  }

 private:
  // Leases the range and makes the header.
  absl::Status Begin() {
    if (held_ == nullptr) return absl::FailedPreconditionError("this node leader holds no model");
    LOCALSGD_ASSIGN_OR_RETURN(
        const HeldModel::Lease lease,
        held_->Open(request_.run_id(), request_.round(), request_.chunk_values(),
                    request_.begin_chunk(), request_.end_chunk(), request_.include_momentum()));
    lease_ = lease.id;
    has_momentum_ = lease.has_momentum;
    v1::ModelHeader* header = message_.mutable_header();
    header->set_run_id(request_.run_id());
    header->set_round(request_.round());
    header->set_global_step(lease.global_step);
    header->set_vector_length(lease.layout.num_values);
    header->set_num_chunks(lease.layout.num_chunks());
    header->set_chunk_values(lease.layout.chunk_values);
    header->set_has_momentum(has_momentum_);
    return absl::OkStatus();
  }

  HeldModel* const held_;
  const v1::FetchRangeRequest request_;
  int64_t lease_ = 0;
  bool has_momentum_ = false;
  bool values_read_ = false;
  v1::FetchModelResponse message_;
};

class DataPlaneService final
    : public v1::DataPlane::WithCallbackMethod_FetchRange<v1::DataPlane::WithRawCallbackMethod_Pass<
          v1::DataPlane::WithRawCallbackMethod_Reduce<v1::DataPlane::Service>>> {
 public:
  DataPlaneService(ShardOwner* owner, RingInbox* inbox, const StreamTagCheck* tags, HeldModel* held,
                   std::string token)
      : owner_(owner), inbox_(inbox), tags_(tags), held_(held), token_(std::move(token)) {}

  grpc::ServerWriteReactor<v1::FetchModelResponse>* FetchRange(
      grpc::CallbackServerContext* context, const v1::FetchRangeRequest* request) override {
    return new FetchRangeReactor(held_, *request,
                                 CheckBearerToken(context->client_metadata(), token_));
  }

  ReduceReactorBase* Reduce(grpc::CallbackServerContext* context) override {
    return new ReduceReactor(owner_, tags_, CheckBearerToken(context->client_metadata(), token_));
  }

  grpc::ServerReadReactor<grpc::ByteBuffer>* Pass(grpc::CallbackServerContext* context,
                                                  grpc::ByteBuffer* response) override {
    return new PassReactor(inbox_, tags_, CheckBearerToken(context->client_metadata(), token_),
                           response);
  }

 private:
  ShardOwner* const owner_;
  RingInbox* const inbox_;
  const StreamTagCheck* const tags_;
  HeldModel* const held_;
  const std::string token_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DataPlaneServer>> DataPlaneServer::Start(Options options) {
  LOCALSGD_ASSIGN_OR_RETURN(HostPort address, ParseHostPort(options.address, "--data_address"));
  LOCALSGD_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                            MakeServerCredentials(options.tls));
  std::unique_ptr<DataPlaneServer> self(new DataPlaneServer(std::move(options.identity)));
  self->service_ = std::make_unique<DataPlaneService>(&self->owner_, &self->inbox_, &self->tags_,
                                                      options.held, options.token);
  grpc::ServerBuilder builder;
  UseStreamingArguments(&builder);
  int port = 0;
  builder.AddListeningPort(options.address, credentials, &port);
  builder.RegisterService(self->service_.get());
  self->server_ = builder.BuildAndStart();
  if (self->server_ == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("--data_address: cannot listen on ", options.address));
  }
  address.port = port;
  self->address_ = address.ToString();
  return self;
}

DataPlaneServer::~DataPlaneServer() { Shutdown(); }

void DataPlaneServer::Shutdown() {
  if (server_ == nullptr) return;
  // Open streams are cancelled after a short grace period.
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  server_->Wait();
  server_.reset();
}

}  // namespace localsgd
