#include "exchange/star_client.h"

#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "exchange/codec.h"

namespace localsgd {

namespace {
constexpr char kStaleRoundPayload[] = "type.googleapis.com/localsgd.v1.StaleRound";
}  // namespace

std::optional<v1::StaleRound> StaleRoundOf(const absl::Status& status) {
  if (!absl::IsFailedPrecondition(status)) return std::nullopt;
  absl::optional<absl::Cord> payload = status.GetPayload(kStaleRoundPayload);
  v1::StaleRound stale;
  if (!payload.has_value() || !stale.ParseFromString(std::string(*payload))) return std::nullopt;
  return stale;
}

absl::Status StaleRoundError(const v1::StaleRound& stale, absl::string_view message) {
  absl::Status status = absl::FailedPreconditionError(message);
  status.SetPayload(kStaleRoundPayload, absl::Cord(stale.SerializeAsString()));
  return status;
}

void EncodeDeltaChunk(v1::Codec codec, const ChunkLayout& layout, int c,
                      absl::Span<const float> params, absl::Span<const float> global,
                      v1::Chunk* out) {
  const size_t begin = static_cast<size_t>(layout.begin(c));
  const size_t size = static_cast<size_t>(layout.size(c));
  out->set_index(c);
  EncodeDifference(codec, params.subspan(begin, size), global.subspan(begin, size),
                   out->mutable_data());
}

absl::StatusOr<v1::RoundHeader> BeginSync(SyncStream* stream, grpc::ClientContext* context,
                                          const SyncMember& member, int64_t round, int64_t step,
                                          int64_t vector_length) {
  v1::SyncRequest header_message;
  v1::SyncHeader* header = header_message.mutable_header();
  header->set_run_id(member.run_id);
  header->set_round(round);
  header->set_member_id(member.member_id);
  header->set_vector_length(vector_length);
  header->set_codec(member.codec);
  header->set_weight(member.weight);
  header->set_step(step);
  header->set_num_workers(member.num_workers);
  if (!stream->Write(header_message)) return FromGrpcStatus(stream->Finish());
  v1::SyncResponse response;
  if (stream->Read(&response) && response.has_header()) return response.header();
  std::optional<v1::StaleRound> stale;
  if (response.has_stale()) {
    stale = response.stale();
  } else if (response.kind_case() != v1::SyncResponse::KIND_NOT_SET) {
    context->TryCancel();  // not a message that can come first: do not wait for more
  }
  stream->WritesDone();
  grpc::Status status = stream->Finish();
  if (stale.has_value() && !status.ok()) return StaleRoundError(*stale, status.error_message());
  return status.ok() ? absl::InternalError("no round header") : FromGrpcStatus(status);
}

StarClient::StarClient(std::shared_ptr<grpc::Channel> channel, std::string token)
    : stub_(v1::Averaging::NewStub(std::move(channel))), token_(std::move(token)) {}

std::unique_ptr<grpc::ClientContext> StarClient::Context(absl::Duration timeout) const {
  return AuthorizedContext(token_, timeout);
}

absl::StatusOr<StarClient::SyncResult> StarClient::Sync(const Member& member, int64_t round,
                                                        int64_t step,
                                                        absl::Span<const float> params,
                                                        absl::Span<float> global,
                                                        absl::Duration timeout) {
  if (params.size() != global.size()) {
    return absl::InvalidArgumentError("params and global differ in length");
  }
  auto context = Context(timeout);
  auto stream = stub_->Sync(context.get());
  // The first reply says how the vector is chunked; then a writer thread streams the delta
  // while this thread reads the update chunks as they come (they may come before the last
  // delta chunk is sent).
  LOCALSGD_ASSIGN_OR_RETURN(v1::RoundHeader begun,
                            BeginSync(stream.get(), context.get(), member, round, step,
                                      static_cast<int64_t>(params.size())));
  v1::SyncResponse response;
  const v1::RoundHeader& round_header = begun;
  const ChunkLayout layout{static_cast<int64_t>(params.size()), round_header.chunk_values()};
  if (round_header.chunk_values() <= 0 || layout.num_chunks() != round_header.num_chunks()) {
    context->TryCancel();
    stream->Finish();
    return absl::InternalError("round header does not match the vector");
  }
  std::thread writer([&] {
    v1::SyncRequest request;
    for (int c = 0; c < layout.num_chunks(); ++c) {
      EncodeDeltaChunk(member.codec, layout, c, params, global, request.mutable_chunk());
      if (!stream->Write(request)) return;
    }
    stream->WritesDone();
  });

  // The decoded update waits here until the commit. Kept per thread and reused round after
  // round: a fresh model-sized buffer each round costs a page fault per 4 KiB.
  thread_local std::vector<float> update;
  update.resize(params.size());
  std::vector<bool> received(static_cast<size_t>(layout.num_chunks()), false);
  int received_count = 0;
  absl::Status problem;
  SyncResult result;
  bool committed = false;
  while (stream->Read(&response)) {
    if (response.has_update()) {
      const int c = response.update().index();
      if (c < 0 || c >= layout.num_chunks() || received[c]) {
        problem = absl::InternalError(absl::StrCat("unexpected update chunk ", c));
        break;
      }
      problem = Decode(
          round_header.codec(), response.update().data(),
          absl::MakeSpan(update.data() + layout.begin(c), static_cast<size_t>(layout.size(c))));
      if (!problem.ok()) break;
      received[c] = true;
      ++received_count;
    } else if (response.has_commit()) {
      result.round = response.commit().round();
      result.global_step = response.commit().global_step();
      result.members.assign(response.commit().members().begin(), response.commit().members().end());
      committed = true;
    }
  }
  if (!problem.ok()) context->TryCancel();
  writer.join();
  grpc::Status status = stream->Finish();
  if (!problem.ok()) return problem;
  if (!status.ok()) return FromGrpcStatus(status);
  if (!committed || received_count != layout.num_chunks()) {
    return absl::InternalError("the stream ended without a complete, committed update");
  }
  for (size_t i = 0; i < global.size(); ++i) global[i] += update[i];
  return result;
}

absl::Status StarClient::InitModel(const std::string& run_id, const std::string& member_id,
                                   absl::Span<const float> values, const ChunkLayout& layout,
                                   absl::Duration timeout) {
  auto context = Context(timeout);
  v1::InitModelResponse response;
  auto stream = stub_->InitModel(context.get(), &response);
  v1::InitModelRequest request;
  request.mutable_header()->set_run_id(run_id);
  request.mutable_header()->set_member_id(member_id);
  request.mutable_header()->set_vector_length(static_cast<int64_t>(values.size()));
  bool ok = stream->Write(request);
  for (int c = 0; ok && c < layout.num_chunks(); ++c) {
    request.mutable_chunk()->set_index(c);
    request.mutable_chunk()->set_data(
        reinterpret_cast<const char*>(values.data() + layout.begin(c)),
        static_cast<size_t>(layout.size(c)) * sizeof(float));
    ok = stream->Write(request);
  }
  stream->WritesDone();
  return FromGrpcStatus(stream->Finish());
}

absl::StatusOr<StarClient::Model> StarClient::FetchModel(const std::string& run_id,
                                                         absl::Duration timeout,
                                                         bool include_momentum) {
  auto context = Context(timeout);
  v1::FetchModelRequest request;
  request.set_run_id(run_id);
  request.set_include_momentum(include_momentum);
  auto stream = stub_->FetchModel(context.get(), request);
  v1::FetchModelResponse response;
  Model model;
  std::optional<ChunkLayout> layout;
  int chunks = 0;
  int momentum_chunks = 0;
  bool has_momentum = false;
  while (stream->Read(&response)) {
    if (response.has_header()) {
      model.run_id = response.header().run_id();
      model.round = response.header().round();
      model.global_step = response.header().global_step();
      layout = ChunkLayout{response.header().vector_length(), response.header().chunk_values()};
      if (layout->num_values < 0 || layout->chunk_values <= 0) break;
      model.values.resize(static_cast<size_t>(layout->num_values));
      has_momentum = response.header().has_momentum();
      if (has_momentum) model.momentum.resize(model.values.size());
    } else if (layout.has_value() && (response.has_chunk() || response.has_momentum())) {
      const bool momentum = response.has_momentum();
      const v1::Chunk& chunk = momentum ? response.momentum() : response.chunk();
      const size_t bytes = static_cast<size_t>(layout->size(chunk.index())) * sizeof(float);
      if (chunk.index() < 0 || chunk.index() >= layout->num_chunks() ||
          chunk.data().size() != bytes || (momentum && !has_momentum)) {
        context->TryCancel();
        stream->Finish();
        return absl::InternalError("malformed model chunk");
      }
      std::vector<float>& into = momentum ? model.momentum : model.values;
      std::memcpy(into.data() + layout->begin(chunk.index()), chunk.data().data(), bytes);
      ++(momentum ? momentum_chunks : chunks);
    }
  }
  grpc::Status status = stream->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  if (!layout.has_value() || chunks != layout->num_chunks() ||
      momentum_chunks != (has_momentum ? layout->num_chunks() : 0)) {
    return absl::InternalError("incomplete model");
  }
  return model;
}

}  // namespace localsgd
