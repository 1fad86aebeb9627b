#include "exchange/model_client.h"

#include <cstring>
#include <optional>
#include <utility>

#include "common/auth.h"
#include "common/status_util.h"

namespace localsgd {
namespace {

v1::FetchModelRequest FetchRequest(const std::string& run_id, bool include_momentum,
                                   bool holders_only) {
  v1::FetchModelRequest request;
  request.set_run_id(run_id);
  request.set_include_momentum(include_momentum);
  request.set_holders_only(holders_only);
  return request;
}

}  // namespace

ModelClient::ModelClient(std::shared_ptr<grpc::Channel> channel, std::string token)
    : stub_(v1::Averaging::NewStub(std::move(channel))), token_(std::move(token)) {}

std::unique_ptr<grpc::ClientContext> ModelClient::Context(absl::Duration timeout) const {
  return AuthorizedContext(token_, timeout);
}

absl::StatusOr<v1::InitModelResponse> ModelClient::InitModel(
    const std::string& run_id, const std::string& member_id, const std::string& credential,
    absl::Span<const float> values, const ChunkLayout& layout, absl::Duration timeout,
    const Checkpoint* checkpoint) {
  auto context = Context(timeout);
  v1::InitModelResponse response;
  auto stream = stub_->InitModel(context.get(), &response);
  v1::InitModelRequest request;
  v1::InitModelHeader* header = request.mutable_header();
  header->set_run_id(run_id);
  header->set_member_id(member_id);
  header->set_member_credential(credential);
  header->set_vector_length(static_cast<int64_t>(values.size()));
  const bool momentum = checkpoint != nullptr && !checkpoint->momentum.empty();
  if (checkpoint != nullptr) {
    header->set_from_checkpoint(true);
    header->set_checkpoint_round(checkpoint->round);
    header->set_checkpoint_global_step(checkpoint->global_step);
    header->set_has_momentum(momentum);
  }
  bool ok = stream->Write(request);
  for (int b = 0; b < (momentum ? 2 : 1); ++b) {
    const float* from = b == 0 ? values.data() : checkpoint->momentum.data();
    for (int c = 0; ok && c < layout.num_chunks(); ++c) {
      v1::Chunk* chunk = b == 0 ? request.mutable_chunk() : request.mutable_momentum();
      chunk->set_index(c);
      chunk->set_data(reinterpret_cast<const char*>(from + layout.begin(c)),
                      static_cast<size_t>(layout.size(c)) * sizeof(float));
      ok = stream->Write(request);
    }
  }
  stream->WritesDone();
  if (grpc::Status status = stream->Finish(); !status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<ModelClient::Model> ModelClient::FetchModel(const std::string& run_id,
                                                           absl::Duration timeout,
                                                           bool include_momentum) {
  auto context = Context(timeout);
  auto stream = stub_->FetchModel(context.get(), FetchRequest(run_id, include_momentum, false));
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

absl::StatusOr<v1::ModelHeader> ModelClient::FetchHolders(const std::string& run_id,
                                                          absl::Duration timeout,
                                                          bool include_momentum) {
  auto context = Context(timeout);
  auto stream = stub_->FetchModel(context.get(), FetchRequest(run_id, include_momentum, true));
  v1::FetchModelResponse response;
  std::optional<v1::ModelHeader> header;
  while (stream->Read(&response)) {
    if (response.has_header() && !header.has_value()) header = response.header();
  }
  if (grpc::Status status = stream->Finish(); !status.ok()) return FromGrpcStatus(status);
  if (!header.has_value()) return absl::InternalError("the coordinator sent no model header");
  return *std::move(header);
}

}  // namespace localsgd
