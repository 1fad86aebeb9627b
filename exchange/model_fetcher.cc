#include "exchange/model_fetcher.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/auth.h"
#include "common/grpc_channel.h"
#include "common/log.h"
#include "common/model_store.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "exchange/chunking.h"
#include "exchange/model_digest.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"

namespace localsgd {
namespace {

// Chunks [begin, end) of the model of `header` (and of its momentum when `momentum`) from the
// holder at `address`, into `model`'s buffers.
absl::Status FetchRange(const std::shared_ptr<grpc::Channel>& channel, const std::string& token,
                        const v1::ModelHeader& header, int begin, int end, bool momentum,
                        absl::Duration timeout, ModelClient::Model* model) {
  const ChunkLayout layout{header.vector_length(), header.chunk_values()};
  auto stub = v1::DataPlane::NewStub(channel);
  auto context = AuthorizedContext(token, timeout);
  v1::FetchRangeRequest request;
  request.set_run_id(header.run_id());
  request.set_round(header.round());
  request.set_chunk_values(header.chunk_values());
  request.set_begin_chunk(begin);
  request.set_end_chunk(end);
  request.set_include_momentum(momentum);
  auto stream = stub->FetchRange(context.get(), request);
  v1::FetchModelResponse response;
  std::vector<bool> got(static_cast<size_t>(2 * (end - begin)), false);
  absl::Status bad;
  bool headed = false;
  while (bad.ok() && stream->Read(&response)) {
    if (response.has_header()) {
      const v1::ModelHeader& h = response.header();
      if (headed || h.run_id() != header.run_id() || h.round() != header.round() ||
          h.vector_length() != header.vector_length() || h.has_momentum() != momentum) {
        bad = absl::DataLossError("its header is not the coordinator's");
      }
      headed = true;
      continue;
    }
    const bool is_momentum = response.has_momentum();
    const v1::Chunk& chunk = is_momentum ? response.momentum() : response.chunk();
    const int index = chunk.index();
    if (!headed || (is_momentum && !momentum) || index < begin || index >= end ||
        chunk.data().size() != static_cast<size_t>(layout.size(index)) * sizeof(float) ||
        got[static_cast<size_t>((is_momentum ? end - begin : 0) + index - begin)]) {
      bad = absl::DataLossError(absl::StrCat("it sent a malformed chunk (", index, ")"));
      break;
    }
    got[static_cast<size_t>((is_momentum ? end - begin : 0) + index - begin)] = true;
    std::vector<float>& into = is_momentum ? model->momentum : model->values;
    std::memcpy(into.data() + layout.begin(index), chunk.data().data(), chunk.data().size());
  }
  if (!bad.ok()) {
    context->TryCancel();
    stream->Finish();
    return bad;
  }
  if (grpc::Status status = stream->Finish(); !status.ok()) return FromGrpcStatus(status);
  const size_t expected = static_cast<size_t>((momentum ? 2 : 1) * (end - begin));
  if (!headed || std::count(got.begin(), got.end(), true) != static_cast<int64_t>(expected)) {
    return absl::DataLossError("it ended before sending its range");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelFetcher::Fetched> ModelFetcher::Fetch(const std::string& run_id,
                                                          absl::Duration timeout,
                                                          bool include_momentum) const {
  // Holders that moved on to a newer round meanwhile: ask again for the newest (into the same
  // buffers: allocating them takes long enough for a round to commit).
  Fetched fetched;
  std::string failed;  // why the holders (and the checkpoint) could not serve it
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    absl::StatusOr<v1::ModelHeader> header =
        options_.coordinator->FetchHolders(run_id, timeout, include_momentum);
    if (!header.ok()) break;
    const absl::Status status = FromHolders(*header, timeout, include_momentum, &fetched);
    if (status.ok()) return fetched;
    failed = absl::StrCat("the run's model of round ", header->round(),
                          " from its holders: ", status.message());
    if (!absl::IsFailedPrecondition(status)) {
      const absl::Status saved = FromCheckpoint(*header, include_momentum, &fetched);
      if (saved.ok()) return fetched;
      if (!absl::IsNotFound(saved)) absl::StrAppend(&failed, "; its checkpoint: ", saved.message());
      if (!absl::IsNotFound(status)) LogWarning(failed);
      break;
    }
    LogInfo(absl::StrCat(failed, " (asking the coordinator again)"));
  }
  // A star run's model; a sharded run's lives with its holders alone (the coordinator says so).
  absl::StatusOr<ModelClient::Model> model =
      options_.coordinator->FetchModel(run_id, timeout, include_momentum);
  if (!model.ok()) {
    if (failed.empty()) return model.status();
    return absl::Status(model.status().code(),
                        absl::StrCat(failed, "; the coordinator: ", model.status().message()));
  }
  return Fetched{*std::move(model), "the coordinator"};
}

absl::Status ModelFetcher::FromCheckpoint(const v1::ModelHeader& header, bool include_momentum,
                                          Fetched* out) {
  if (header.checkpoint_path().empty() || header.checkpoint_round() != header.round()) {
    return absl::NotFoundError("no checkpoint of the round");
  }
  const std::string& path = header.checkpoint_path();
  LOCALSGD_ASSIGN_OR_RETURN(std::optional<ModelCheckpoint> loaded, ModelStore::At(path).Load());
  if (!loaded.has_value()) return absl::NotFoundError(absl::StrCat(path, " is not there"));
  if (loaded->run_id != header.run_id() || loaded->round != header.round() ||
      static_cast<int64_t>(loaded->global.size()) != header.vector_length()) {
    return absl::DataLossError(absl::StrCat(path, " holds round ", loaded->round, " of run ",
                                            loaded->run_id, ", not this model"));
  }
  const bool momentum = include_momentum && header.has_momentum();
  if (!momentum) loaded->momentum.clear();
  const ChunkLayout layout{header.vector_length(), header.chunk_values()};
  if (ModelDigest(loaded->global, loaded->momentum, layout).with_momentum != header.digest()) {
    return absl::DataLossError(absl::StrCat(path, " does not match the coordinator's digest"));
  }
  out->model.run_id = header.run_id();
  out->model.round = header.round();
  out->model.global_step = header.global_step();
  out->model.values = std::move(loaded->global);
  out->model.momentum = std::move(loaded->momentum);
  out->source = absl::StrCat("checkpoint ", path);
  return absl::OkStatus();
}

absl::Status ModelFetcher::FromHolders(const v1::ModelHeader& header, absl::Duration timeout,
                                       bool include_momentum, Fetched* out) const {
  std::vector<const v1::ModelHolder*> holders;
  for (const v1::ModelHolder& holder : header.holders()) {
    if (holder.member_id() != options_.member_id && !holder.data_address().empty()) {
      holders.push_back(&holder);
    }
  }
  const ChunkLayout layout{header.vector_length(), header.chunk_values()};
  if (holders.empty() || layout.num_values <= 0 || layout.chunk_values <= 0) {
    return absl::NotFoundError("no other node leader holds it");
  }
  const int chunks = layout.num_chunks();
  const int sources = std::min({static_cast<int>(holders.size()), kMaxSources, chunks});
  const bool momentum = include_momentum && header.has_momentum();
  Fetched& fetched = *out;
  fetched.model.run_id = header.run_id();
  fetched.model.round = header.round();
  fetched.model.global_step = header.global_step();
  fetched.model.values.resize(static_cast<size_t>(layout.num_values));
  fetched.model.momentum.resize(momentum ? fetched.model.values.size() : 0);
  // Range i from holder i, or when it fails from the next holders in turn.
  std::vector<absl::Status> results(static_cast<size_t>(sources));
  std::vector<std::string> served_by(static_cast<size_t>(sources));
  std::vector<std::thread> threads;
  for (int i = 0; i < sources; ++i) {
    const int begin = static_cast<int>(static_cast<int64_t>(chunks) * i / sources);
    const int end = static_cast<int>(static_cast<int64_t>(chunks) * (i + 1) / sources);
    threads.emplace_back([&, i, begin, end] {
      std::string failures;
      for (size_t k = 0; k < holders.size(); ++k) {
        const v1::ModelHolder& from = *holders[(static_cast<size_t>(i) + k) % holders.size()];
        const absl::Status s = FetchRange(
            CreateStreamingChannel(from.data_address(), options_.peer_credentials != nullptr
                                                            ? options_.peer_credentials
                                                            : grpc::InsecureChannelCredentials()),
            options_.token, header, begin, end, momentum, timeout, &fetched.model);
        if (s.ok()) {
          served_by[static_cast<size_t>(i)] = from.member_id();
          return;
        }
        absl::StrAppend(&failures, failures.empty() ? "" : "; ", from.member_id(), " (",
                        from.data_address(), "): ", s.message());
        results[static_cast<size_t>(i)] = absl::Status(s.code(), failures);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < results.size(); ++i) {
    if (served_by[i].empty()) return results[i];
  }
  std::vector<std::string> names = served_by;
  names.erase(std::unique(names.begin(), names.end()), names.end());
  // Without the momentum, the digest with an empty momentum: the values' (DigestPair).
  const auto matches = [&] {
    return ModelDigest(fetched.model.values, fetched.model.momentum, layout).with_momentum ==
           header.digest();
  };
  if (matches()) {
    fetched.source = absl::StrJoin(names, ", ");
    return absl::OkStatus();
  }
  // One of them served other bytes: the whole model from each holder alone, until one matches.
  std::vector<std::string> differ;
  for (const v1::ModelHolder* holder : holders) {
    const absl::Status s = FetchRange(
        CreateStreamingChannel(holder->data_address(), options_.peer_credentials != nullptr
                                                           ? options_.peer_credentials
                                                           : grpc::InsecureChannelCredentials()),
        options_.token, header, 0, chunks, momentum, timeout, &fetched.model);
    if (s.ok() && matches()) {
      LogWarning(absl::StrCat("the model from ", absl::StrJoin(names, ", "),
                              " did not match the coordinator's digest; ", holder->member_id(),
                              "'s alone does"));
      fetched.source = holder->member_id();
      return absl::OkStatus();
    }
    differ.push_back(holder->member_id());
  }
  return absl::DataLossError(absl::StrCat("the model from ", absl::StrJoin(differ, ", "),
                                          " does not match the coordinator's digest"));
}

}  // namespace localsgd
