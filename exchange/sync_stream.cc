#include "exchange/sync_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "exchange/codec.h"

namespace localsgd {

namespace {
constexpr char kStaleRoundPayload[] = "type.googleapis.com/localsgd.v1.StaleRound";
constexpr char kRoundFragmentPayload[] = "type.googleapis.com/localsgd.v1.RoundFragment";
}  // namespace

std::optional<int> RoundFragmentOf(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kRoundFragmentPayload);
  v1::RoundFragment round;
  if (!payload.has_value() || !round.ParseFromString(std::string(*payload))) return std::nullopt;
  return round.fragment();
}

absl::Status WithRoundFragment(absl::Status status, const v1::RoundFragment& round) {
  if (!status.ok()) status.SetPayload(kRoundFragmentPayload, absl::Cord(round.SerializeAsString()));
  return status;
}

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
                                          int fragment, int64_t vector_length) {
  v1::SyncRequest header_message;
  v1::SyncHeader* header = header_message.mutable_header();
  header->set_run_id(member.run_id);
  header->set_round(round);
  header->set_member_id(member.member_id);
  header->set_member_credential(member.CurrentCredential());
  header->set_vector_length(vector_length);
  header->set_codec(member.codec);
  header->set_weight(member.weight);
  header->set_step(step);
  header->set_num_workers(member.num_workers);
  header->set_fragment(fragment);
  if (!stream->Write(header_message)) return FromGrpcStatus(stream->Finish());
  v1::SyncResponse response;
  if (stream->Read(&response) && response.has_header()) {
    if (response.header().fragment() == fragment) return response.header();
    context->TryCancel();
    stream->Finish();
    v1::RoundFragment other;
    other.set_round(round);
    other.set_fragment(response.header().fragment());
    return WithRoundFragment(
        absl::AbortedError(absl::StrCat("round ", round, " carries fragment ", other.fragment(),
                                        ", this member's ", fragment,
                                        " (its step differs from the others')")),
        other);
  }
  std::optional<v1::StaleRound> stale;
  std::optional<v1::RoundFragment> other;
  if (response.has_stale()) {
    stale = response.stale();
  } else if (response.has_other_fragment()) {
    other = response.other_fragment();
  } else if (response.kind_case() != v1::SyncResponse::KIND_NOT_SET) {
    context->TryCancel();  // not a message that can come first: do not wait for more
  }
  stream->WritesDone();
  grpc::Status status = stream->Finish();
  if (stale.has_value() && !status.ok()) return StaleRoundError(*stale, status.error_message());
  if (other.has_value() && !status.ok()) return WithRoundFragment(FromGrpcStatus(status), *other);
  return status.ok() ? absl::InternalError("no round header") : FromGrpcStatus(status);
}

}  // namespace localsgd
