#include "coordinator/averaging_service.h"

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "exchange/model_digest.h"
#include "exchange/stream_outbox.h"
#include "exchange/write_batch.h"

namespace localsgd {
namespace {

// The RoundMember side of a Sync stream: messages go out through an outbox into the reactor.
class SyncCallMember : public RoundMember {
 public:
  SyncCallMember(grpc::ServerBidiReactor<v1::SyncRequest, v1::SyncResponse>* reactor,
                 grpc::CallbackServerContext* context)
      : outbox_(
            // One write at a time (the outbox's rule), so the batch needs no lock.
            [reactor, batch = WriteBatch()](const std::shared_ptr<const v1::SyncResponse>& m,
                                            bool more) mutable {
              reactor->StartWrite(m.get(),
                                  batch.Next(static_cast<int64_t>(m->ByteSizeLong()), more));
            },
            [reactor](const grpc::Status& s) { reactor->Finish(s); },
            [context] { context->TryCancel(); }) {}

  void Enqueue(std::shared_ptr<const v1::SyncResponse> message) override {
    outbox_.Enqueue(std::move(message));
  }
  void Cancel() override {
    outbox_.Cancel(
        grpc::Status(grpc::StatusCode::CANCELLED, "this member opened a newer Sync stream"));
  }
  void Close(const absl::Status& status) override { outbox_.Close(ToGrpcStatus(status)); }
  void Flush() override { outbox_.Flush(); }
  StreamOutbox<v1::SyncResponse>& outbox() { return outbox_; }

 private:
  StreamOutbox<v1::SyncResponse> outbox_;
};

// One member's Sync call: reads the header and the chunks and hands them to the round
// manager; what the round manager sends back goes out through the member's outbox.
class SyncReactor : public grpc::ServerBidiReactor<v1::SyncRequest, v1::SyncResponse> {
 public:
  SyncReactor(RoundManager* rounds, grpc::CallbackServerContext* context, const absl::Status& auth)
      : rounds_(rounds), member_(std::make_shared<SyncCallMember>(this, context)) {
    if (!auth.ok()) {
      End(auth);
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client closed its side: normal once every chunk is sent, else it gave up.
      if (session_ != 0) {
        rounds_->EndOfInput(session_);
      } else {
        End(absl::InvalidArgumentError("the stream ended before a header"));
      }
      return;
    }
    absl::Status status;
    if (session_ == 0) {
      if (!request_.has_header()) {
        status = absl::InvalidArgumentError("the first message must be a header");
      } else {
        absl::StatusOr<int64_t> session = rounds_->Join(request_.header(), member_);
        status = session.status();
        if (session.ok()) session_ = *session;
      }
    } else if (request_.has_chunk()) {
      // On bad input the round manager drops the member and closes its stream itself.
      status = rounds_->AddChunk(session_, request_.chunk());
    } else if (request_.has_delivered()) {
      status = rounds_->Deliver(session_, request_.delivered());
    } else if (request_.has_unreachable()) {
      status = rounds_->Unreachable(session_, request_.unreachable());
    } else {
      status = absl::InvalidArgumentError(
          request_.has_header() ? "header sent twice"
                                : "an empty message: chunks, delivered or unreachable follow the "
                                  "header");
      rounds_->Leave(session_, status);
    }
    if (!status.ok()) {
      End(status);
      return;
    }
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override { member_->outbox().OnWriteDone(ok); }

  void OnCancel() override {
    if (session_ != 0) rounds_->Leave(session_, absl::CancelledError("the member went away"));
    member_->outbox().Abandon(grpc::Status::CANCELLED);
  }

  void OnDone() override { delete this; }

 private:
  void End(const absl::Status& status) {
    member_->Close(status);
    member_->Flush();
  }

  RoundManager* const rounds_;
  const std::shared_ptr<SyncCallMember> member_;
  v1::SyncRequest request_;
  int64_t session_ = 0;
};

// InitModel: gathers the fp32 chunks of global[0] (or of a node's checkpoint, and its
// momentum), then hands the whole vectors over.
class InitModelReactor : public grpc::ServerReadReactor<v1::InitModelRequest> {
 public:
  InitModelReactor(RoundManager* rounds, v1::InitModelResponse* response, const absl::Status& auth)
      : rounds_(rounds), response_(response) {
    if (!auth.ok()) {
      End(auth);
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      End(Complete());
      return;
    }
    absl::Status status = Take();
    if (!status.ok()) {
      End(status);
      return;
    }
    StartRead(&request_);
  }

  void OnCancel() override { End(absl::CancelledError("cancelled")); }
  void OnDone() override { delete this; }

 private:
  absl::Status Take() {
    if (!upload_.has_value()) {
      if (!request_.has_header()) {
        return absl::InvalidArgumentError("the first message must be a header");
      }
      header_ = request_.header();
      LOCALSGD_ASSIGN_OR_RETURN(ModelUpload upload, rounds_->BeginInit(header_));
      upload_.emplace(std::move(upload));
      return absl::OkStatus();
    }
    if (request_.has_header()) return absl::InvalidArgumentError("header sent twice");
    const bool momentum = request_.has_momentum();
    return upload_->Take(momentum,
                         momentum ? request_.mutable_momentum() : request_.mutable_chunk());
  }

  absl::Status Complete() {
    if (!upload_.has_value()) {
      return absl::InvalidArgumentError("the stream ended before a header");
    }
    LOCALSGD_RETURN_IF_ERROR(upload_->Complete());
    response_->set_vector_length(upload_->layout().num_values);
    return rounds_->FinishInit(header_, *std::move(upload_), response_);
  }

  void End(const absl::Status& status) {
    MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    Finish(ToGrpcStatus(status));
  }

  RoundManager* const rounds_;
  v1::InitModelResponse* const response_;
  v1::InitModelRequest request_;
  v1::InitModelHeader header_;
  std::optional<ModelUpload> upload_;  // once the header was accepted
  Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// FetchModel: a header, then the snapshot's chunks one write at a time.
class FetchModelReactor : public grpc::ServerWriteReactor<v1::FetchModelResponse> {
 public:
  FetchModelReactor(RoundManager* rounds, const v1::FetchModelRequest& request,
                    const absl::Status& auth)
      : include_momentum_(request.include_momentum()) {
    absl::StatusOr<RoundManager::ModelSnapshot> snapshot =
        auth.ok() ? rounds->FetchModel(request.run_id())
                  : absl::StatusOr<RoundManager::ModelSnapshot>(auth);
    if (!snapshot.ok()) {
      Finish(ToGrpcStatus(snapshot.status()));
      return;
    }
    snapshot_ = *std::move(snapshot);
    v1::ModelHeader* header = message_.mutable_header();
    header->set_run_id(snapshot_.run_id);
    header->set_round(snapshot_.round);
    header->set_global_step(snapshot_.global_step);
    header->set_vector_length(snapshot_.layout.num_values);
    header->set_num_chunks(snapshot_.layout.num_chunks());
    header->set_chunk_values(snapshot_.layout.chunk_values);
    include_momentum_ = include_momentum_ && snapshot_.has_momentum;
    header->set_has_momentum(include_momentum_);
    if (request.holders_only()) {  // the header alone: the caller fetches from the holders
      header->set_digest(include_momentum_ ? snapshot_.digest.with_momentum
                                           : snapshot_.digest.values);
      for (v1::ModelHolder& holder : rounds->Holders(snapshot_.run_id, snapshot_.round)) {
        *header->add_holders() = std::move(holder);
      }
      if (std::optional<v1::RunInfo> run = rounds->FindRun(snapshot_.run_id);
          run.has_value() && run->has_checkpoint()) {
        header->set_checkpoint_round(run->checkpoint().round());
        header->set_checkpoint_path(run->checkpoint().path());
      }
      // Written and finished in one: a last write alone may wait in gRPC's buffers for the
      // Finish that OnWriteDone would make, on a connection with nothing else to send.
      StartWriteAndFinish(&message_, grpc::WriteOptions(), grpc::Status::OK);
      return;
    }
    if (snapshot_.values == nullptr) {
      // A running run's holders may come back (or a checkpoint be offered): try again.
      const std::string text = absl::StrCat(
          "run ", snapshot_.run_id, " is sharded: its model (round ", snapshot_.round,
          ") lives with its node leaders, and the coordinator keeps no copy; fetch it from "
          "them (FetchModelRequest.holders_only), or from a node's checkpoint "
          "(localsgdctl status names the newest)");
      const std::optional<v1::RunInfo> run = rounds->FindRun(snapshot_.run_id);
      Finish(ToGrpcStatus(run.has_value() && run->state() == v1::RUN_STATE_RUNNING
                              ? absl::UnavailableError(text)
                              : absl::FailedPreconditionError(text)));
      return;
    }
    StartWrite(&message_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(ToGrpcStatus(absl::CancelledError("write failed")));
      return;
    }
    // The model's chunks, then the momentum's (when asked for).
    const ChunkLayout& layout = snapshot_.layout;
    const int chunks = layout.num_chunks();
    if (next_chunk_ == (include_momentum_ ? 2 * chunks : chunks)) {
      Finish(grpc::Status::OK);
      return;
    }
    const bool momentum = next_chunk_ >= chunks;
    const int index = momentum ? next_chunk_ - chunks : next_chunk_;
    const std::vector<float>& values = momentum ? *snapshot_.momentum : *snapshot_.values;
    v1::Chunk* chunk = momentum ? message_.mutable_momentum() : message_.mutable_chunk();
    chunk->set_index(index);
    chunk->set_data(reinterpret_cast<const char*>(values.data() + layout.begin(index)),
                    static_cast<size_t>(layout.size(index)) * sizeof(float));
    ++next_chunk_;
    StartWrite(&message_);
  }

  void OnDone() override { delete this; }

 private:
  bool include_momentum_;
  RoundManager::ModelSnapshot snapshot_;
  v1::FetchModelResponse message_;
  int next_chunk_ = 0;
};

}  // namespace

AveragingService::AveragingService(RoundManager* rounds, std::string token)
    : rounds_(rounds), token_(std::move(token)) {}

grpc::ServerBidiReactor<v1::SyncRequest, v1::SyncResponse>* AveragingService::Sync(
    grpc::CallbackServerContext* context) {
  return new SyncReactor(rounds_, context, CheckBearerToken(context->client_metadata(), token_));
}

}  // namespace localsgd

namespace localsgd {

grpc::ServerReadReactor<v1::InitModelRequest>* AveragingService::InitModel(
    grpc::CallbackServerContext* context, v1::InitModelResponse* response) {
  return new InitModelReactor(rounds_, response,
                              CheckBearerToken(context->client_metadata(), token_));
}

grpc::ServerWriteReactor<v1::FetchModelResponse>* AveragingService::FetchModel(
    grpc::CallbackServerContext* context, const v1::FetchModelRequest* request) {
  return new FetchModelReactor(rounds_, *request,
                               CheckBearerToken(context->client_metadata(), token_));
}

}  // namespace localsgd
