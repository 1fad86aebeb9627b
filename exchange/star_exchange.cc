#include "exchange/star_exchange.h"

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "exchange/codec.h"

namespace localsgd {

StarExchange::StarExchange(std::shared_ptr<grpc::Channel> channel, std::string token)
    : stub_(v1::Averaging::NewStub(std::move(channel))), token_(std::move(token)) {}

absl::StatusOr<ExchangeResult> StarExchange::Run(const SyncMember& member,
                                                 const ExchangeRound& round) {
  const absl::Span<const float> params = round.params;
  const absl::Span<float> global = round.global;
  if (params.size() != global.size()) {
    return absl::InvalidArgumentError("params and global differ in length");
  }
  auto context = AuthorizedContext(token_, round.timeout);
  auto stream = stub_->Sync(context.get());
  // The first reply says how the vector is chunked; then a writer thread streams the delta
  // while this thread reads the update chunks as they come (they may come before the last
  // delta chunk is sent).
  LOCALSGD_ASSIGN_OR_RETURN(v1::RoundHeader begun,
                            BeginSync(stream.get(), context.get(), member, round.round, round.step,
                                      round.fragment, static_cast<int64_t>(params.size())));
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

  // The decoded update waits here until the commit. Reused round after round: a fresh
  // model-sized buffer each round costs a page fault per 4 KiB.
  update_.resize(params.size());
  const absl::Span<float> update = absl::MakeSpan(update_);
  std::vector<bool> received(static_cast<size_t>(layout.num_chunks()), false);
  int received_count = 0;
  absl::Status problem;
  ExchangeResult result;
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
  const auto add = [&] {
    for (size_t i = 0; i < global.size(); ++i) global[i] += update[i];
  };
  if (round.held != nullptr) {
    round.held->Commit(result.round, result.global_step, add);
  } else {
    add();
  }
  return result;
}

}  // namespace localsgd
