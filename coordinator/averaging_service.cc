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
class SyncMember : public RoundMember {
 public:
  SyncMember(grpc::ServerBidiReactor<v1::SyncRequest, v1::SyncResponse>* reactor,
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
      : rounds_(rounds), member_(std::make_shared<SyncMember>(this, context)) {
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
    } else if (request_.has_mean()) {
      status = rounds_->AddMean(session_, request_.mean());
    } else if (request_.has_delivered()) {
      status = rounds_->Deliver(session_, request_.delivered());
    } else if (request_.has_unreachable()) {
      status = rounds_->Unreachable(session_, request_.unreachable());
    } else {
      status = absl::InvalidArgumentError("header sent twice; only chunks may follow it");
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
  const std::shared_ptr<SyncMember> member_;
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
    if (!layout_.has_value()) {
      if (!request_.has_header()) {
        return absl::InvalidArgumentError("the first message must be a header");
      }
      header_ = request_.header();
      LOCALSGD_ASSIGN_OR_RETURN(ChunkLayout layout, rounds_->BeginInit(header_));
      layout_ = layout;
      // Nothing is allocated for the claimed length: chunks are kept as they arrive, so
      // memory follows the bytes actually sent.
      return absl::OkStatus();
    }
    if (request_.has_header()) return absl::InvalidArgumentError("header sent twice");
    const bool momentum = request_.has_momentum();
    if (momentum && !header_.has_momentum()) {
      return absl::InvalidArgumentError("momentum: the header says no momentum follows");
    }
    const char* field = momentum ? "momentum" : "chunk";
    v1::Chunk& chunk = momentum ? *request_.mutable_momentum() : *request_.mutable_chunk();
    std::map<int, std::string>& kept = chunks_[momentum ? 1 : 0];
    if (chunk.index() < 0 || chunk.index() >= layout_->num_chunks()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".index: ", chunk.index(), " is out of range [0, ", layout_->num_chunks(), ")"));
    }
    if (kept.count(chunk.index())) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".index: ", chunk.index(), " sent twice"));
    }
    const size_t bytes = static_cast<size_t>(layout_->size(chunk.index())) * sizeof(float);
    if (chunk.data().size() != bytes) {
      return absl::InvalidArgumentError(absl::StrCat(field, " ", chunk.index(), ": ",
                                                     chunk.data().size(), " bytes, expected ",
                                                     bytes, " (fp32)"));
    }
    kept[chunk.index()] = std::move(*chunk.mutable_data());
    return absl::OkStatus();
  }

  // The vector of `chunks` (every chunk there), which it empties.
  std::vector<float> Assemble(std::map<int, std::string>& chunks) const {
    std::vector<float> values(static_cast<size_t>(layout_->num_values));
    for (auto& [index, bytes] : chunks) {
      std::memcpy(values.data() + layout_->begin(index), bytes.data(), bytes.size());
      std::string().swap(bytes);
    }
    return values;
  }

  absl::Status Complete() {
    if (!layout_.has_value()) return absl::InvalidArgumentError("the stream ended before a header");
    for (int b = 0; b < (header_.has_momentum() ? 2 : 1); ++b) {
      if (static_cast<int64_t>(chunks_[b].size()) != layout_->num_chunks()) {
        return absl::InvalidArgumentError(absl::StrCat("got ", chunks_[b].size(), " of ",
                                                       layout_->num_chunks(),
                                                       b == 0 ? " chunks" : " momentum chunks"));
      }
    }
    // Every byte is here: the vectors can be allocated now.
    std::vector<float> values = Assemble(chunks_[0]);
    std::optional<std::vector<float>> momentum;
    if (header_.has_momentum()) momentum = Assemble(chunks_[1]);
    response_->set_vector_length(layout_->num_values);
    return rounds_->FinishInit(header_, std::move(values), std::move(momentum), response_);
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
  std::optional<ChunkLayout> layout_;
  // fp32 bytes by chunk index, as they arrive: the values', then the momentum's.
  std::map<int, std::string> chunks_[2];
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
    include_momentum_ = include_momentum_ && snapshot_.momentum != nullptr;
    header->set_has_momentum(include_momentum_);
    if (request.holders_only()) {  // the header alone: the caller fetches from the holders
      header->set_digest(include_momentum_ ? snapshot_.digest.with_momentum
                                           : snapshot_.digest.values);
      for (v1::ModelHolder& holder : rounds->Holders(snapshot_.run_id, snapshot_.round)) {
        *header->add_holders() = std::move(holder);
      }
      // Written and finished in one: a last write alone may wait in gRPC's buffers for the
      // Finish that OnWriteDone would make, on a connection with nothing else to send.
      StartWriteAndFinish(&message_, grpc::WriteOptions(), grpc::Status::OK);
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
