#include "exchange/sharded_exchange.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/grpc_channel.h"
#include "common/log.h"
#include "common/run_spec.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "exchange/all_to_all.h"
#include "exchange/codec.h"
#include "exchange/member_round.h"
#include "exchange/model_client.h"
#include "exchange/model_digest.h"
#include "exchange/outer_step.h"
#include "exchange/owner_link.h"
#include "exchange/received_chunk.h"
#include "exchange/ring_member.h"
#include "exchange/round_uploader.h"

namespace localsgd {
namespace {

// The digests of the whole model that a round of `in`'s fragment (laid out by `layout` from
// chunk `first_chunk`) makes, `delivered` being the fragment's: the other fragments' chunks
// are as `in.held` holds them. nullopt for a fragment's round with nothing holding the rest.
std::optional<DigestPair> WholeModelDigest(const ExchangeRound& in, const ChunkLayout& layout,
                                           int first_chunk, DigestPair delivered) {
  if (in.model_values == 0 || in.model_values == static_cast<int64_t>(in.global.size())) {
    return delivered;
  }
  if (in.held == nullptr) return std::nullopt;
  // Combine is XOR: the fragment's chunks as they stand cancel out of the held model's.
  const DigestPair rest =
      RangeDigests::Combine(ModelDigest(in.held->values(), in.held->momentum(),
                                        ChunkLayout{in.model_values, layout.chunk_values}),
                            ModelDigest(in.global, in.momentum, layout, first_chunk));
  return RangeDigests::Combine(rest, delivered);
}

}  // namespace

ShardedExchange::ShardedExchange(Options options)
    : options_(std::move(options)), stub_(v1::Averaging::NewStub(options_.coordinator)) {}

std::shared_ptr<grpc::Channel> ShardedExchange::PeerChannel(const std::string& address,
                                                            int connection) {
  MutexLock lock(&mu_);
  std::shared_ptr<grpc::Channel>& channel = peers_[{address, connection}];
  if (channel == nullptr) {
    channel = CreateStreamingChannel(address,
                                     options_.peer_credentials != nullptr
                                         ? options_.peer_credentials
                                         : grpc::InsecureChannelCredentials(),
                                     connection);
  }
  return channel;
}

absl::StatusOr<ExchangeResult> ShardedExchange::Run(const SyncMember& member,
                                                    const ExchangeRound& in) {
  const absl::Span<const float> params = in.params;
  const absl::Span<float> global = in.global;
  if (params.size() != global.size() || (keeps_momentum() && in.momentum.size() != global.size())) {
    return absl::InvalidArgumentError("params, global and momentum differ in length");
  }
  auto context = AuthorizedContext(options_.token, in.timeout);
  std::unique_ptr<SyncStream> stream = stub_->Sync(context.get());
  // The layout comes once every member has arrived (or at the deadline).
  absl::StatusOr<v1::RoundHeader> begun =
      BeginSync(stream.get(), context.get(), member, in.round, in.step, in.fragment,
                static_cast<int64_t>(params.size()));
  if (!begun.ok()) {
    if (std::optional<ExchangeResult> heard = HearCommit(member, in, begun.status())) {
      return *heard;
    }
    return begun.status();
  }
  unheard_.reset();  // a round is laid out: the one delivered did not commit
  v1::RoundHeader header = *std::move(begun);
  absl::StatusOr<std::unique_ptr<MemberRound>> opened =
      MemberRound::Open(header, member.member_id, static_cast<int64_t>(params.size()),
                        options_.owner != nullptr && options_.inbox != nullptr);
  if (!opened.ok()) {
    context->TryCancel();
    stream->Finish();
    return opened.status();
  }
  MemberRound& round = **opened;
  const ChunkLayout& layout = round.layout();

  RoundUploader uploader(stream.get(), context.get());
  bool owns = false;
  for (int s = 0; s < round.num_ranges(); ++s) {
    if (!round.owns(s)) continue;
    const v1::ShardRange& range = round.range(s);
    ShardOwner::Assignment assignment;
    assignment.run_id = member.run_id;
    assignment.round = header.round();
    assignment.attempt = header.attempt();
    assignment.members.assign(header.members().begin(), header.members().end());
    assignment.weights.assign(header.weights().begin(), header.weights().end());
    assignment.layout = layout;
    assignment.begin_chunk = range.begin_chunk();
    assignment.end_chunk = range.end_chunk();
    assignment.codec = header.codec();
    assignment.max_norm_ratio = options_.max_norm_ratio;
    assignment.trim_fraction = options_.trim_fraction;
    if (absl::Status s = options_.owner->Install(std::move(assignment), &uploader); !s.ok()) {
      uploader.Stop();
      context->TryCancel();
      stream->Finish();
      return s;
    }
    owns = true;
  }

  // Every averaged chunk is decoded into `averaged` as it arrives, and the digest of what the
  // chunk of global and momentum will be is taken then; the commit steps `global` and
  // `momentum` by it in place (one pass, no model-sized copy).
  averaged_.resize(params.size());
  const absl::Span<float> averaged = absl::MakeSpan(averaged_);
  RangeDigests digests(layout.num_chunks(), header.first_chunk());
  Mutex take_mu;  // serialises the round's bookkeeping across the schedule's threads
  std::optional<DigestPair> delivered;  // of the fragment, once delivered (finite)
  std::vector<bool> not_finite(static_cast<size_t>(round.num_ranges()), false);  // by range
  // Takes averaged chunk `c` of range `s`, decoded by `decode` into the chunk's values.
  auto take = [&](int s, int c, const auto& decode) -> absl::Status {
    {
      MutexLock lock(&take_mu);
      LOCALSGD_RETURN_IF_ERROR(round.Expect(s, c));
    }
    const size_t begin = static_cast<size_t>(layout.begin(c));
    const size_t size = static_cast<size_t>(layout.size(c));
    LOCALSGD_RETURN_IF_ERROR(decode(averaged.subspan(begin, size)));
    const std::optional<DigestPair> next = NextChunkDigest(
        options_.outer, averaged.subspan(begin, size), global.subspan(begin, size),
        keeps_momentum() ? in.momentum.subspan(begin, size) : absl::Span<const float>());
    digests.Set(c, next.value_or(kNotFinite));
    bool last = false;
    {
      MutexLock lock(&take_mu);
      if (!next.has_value()) not_finite[static_cast<size_t>(s)] = true;
      last = round.Mark(s, c);
    }
    if (last) {
      // A range whose next copy is not finite is delivered as kNotFinite: the members agree
      // on it and the round aborts.
      std::vector<DigestPair> range_digests;
      DigestPair whole;
      bool finite = true;
      for (int r = 0; r < round.num_ranges(); ++r) {
        finite = finite && !not_finite[static_cast<size_t>(r)];
        range_digests.push_back(
            not_finite[static_cast<size_t>(r)]
                ? kNotFinite
                : digests.Of(round.range(r).begin_chunk(), round.range(r).end_chunk()));
        whole = RangeDigests::Combine(whole, range_digests.back());
      }
      if (finite) {
        MutexLock lock(&take_mu);
        delivered = whole;
      }
      uploader.Deliver(std::move(range_digests));
    }
    return absl::OkStatus();
  };
  auto unreachable = [&uploader](const std::string& id, const absl::Status& why) {
    uploader.Unreachable(id, why);
  };
  // This member's header for a stream to `receiver`, with the tag the coordinator made for it.
  auto reduce_header = [&](const std::string& receiver) {
    v1::ReduceHeader out;
    out.set_run_id(member.run_id);
    out.set_round(header.round());
    out.set_member_id(member.member_id);
    out.set_attempt(header.attempt());
    const auto slot = std::find(header.members().begin(), header.members().end(), receiver);
    const int index = static_cast<int>(slot - header.members().begin());
    if (index < header.stream_tags_size()) out.set_member_tag(header.stream_tags(index));
    return out;
  };

  // What the inbox lets a peer's Pass stream bring in any round: pred sends the sums of N - 1
  // ranges and the means of N - 2, under two vectors of fp32 (the whole model's, with
  // fragments: the next round's fragment may be another size).
  const int64_t stream_bytes =
      2 * std::max<int64_t>(in.model_values, static_cast<int64_t>(params.size())) *
      static_cast<int64_t>(sizeof(float));
  std::unique_ptr<RangeSchedule> schedule;
  if (round.ring()) {
    const int self = round.self();
    const int n = round.num_ranges();
    RingMember::Setup setup;
    setup.header = &header;
    setup.pass_header = reduce_header(header.members((self + 1) % n));
    setup.layout = &layout;
    setup.self = self;
    setup.params = params;
    setup.global = global;
    const int stripes = std::clamp(header.ring_streams(), 1, kMaxRingStreams);
    for (int stripe = 0; stripe < stripes; ++stripe) {
      setup.succ_channels.push_back(PeerChannel(round.range((self + 1) % n).address(), stripe));
      setup.contexts.push_back(AuthorizedContext(options_.token, in.timeout));
    }
    setup.inbox = options_.inbox;
    setup.unreachable = unreachable;
    // A ring's means, read where gRPC received them.
    setup.take_mean = [&](int s, const ReceivedChunk& mean) {
      return take(s, mean.index(),
                  [&](absl::Span<float> out) { return mean.Decode(header.codec(), out); });
    };
    const int pred = (self + n - 1) % n;
    options_.inbox->Follow(member.run_id, header.round(), header.attempt(), header.members(pred),
                           stream_bytes);
    schedule = std::make_unique<RingMember>(std::move(setup));
  } else {
    // No ring this round: the inbox follows it all the same (taking nothing), so that the next
    // ring round, one ahead, is let in.
    if (options_.inbox != nullptr) {
      options_.inbox->Follow(member.run_id, header.round(), header.attempt(), /*from=*/"",
                             stream_bytes);
    }
    AllToAll::Setup setup;
    setup.round = &round;
    for (int s = 0; s < round.num_ranges(); ++s) {
      const v1::ShardRange& range = round.range(s);
      setup.headers.push_back(reduce_header(range.owner_id()));
      if (round.owns(s)) {
        setup.links.push_back(std::make_unique<LocalOwnerLink>(options_.owner));
      } else {
        setup.links.push_back(std::make_unique<GrpcOwnerLink>(
            PeerChannel(range.address()), AuthorizedContext(options_.token, in.timeout),
            range.owner_id(), range.address()));
      }
    }
    setup.encode = [&](int c, v1::Chunk* out) {
      EncodeDeltaChunk(member.codec, layout, c, params, global, out);
    };
    setup.take = [&](int s, const v1::Chunk& mean) {
      return take(s, mean.index(),
                  [&](absl::Span<float> out) { return Decode(header.codec(), mean.data(), out); });
    };
    setup.unreachable = unreachable;
    schedule = std::make_unique<AllToAll>(std::move(setup));
  }

  // The coordinator's side: drop notices, then the commit (or the end of the round).
  ExchangeResult result;
  bool committed = false;
  // This member's copy differs from the others' (its digests): it is to fetch the model.
  std::optional<v1::StaleRound> stale;
  v1::SyncResponse response;
  while (stream->Read(&response)) {
    if (response.has_dropped()) {
      if (owns) options_.owner->Drop(response.dropped().member_id());
    } else if (response.has_stale()) {
      stale = response.stale();
    } else if (response.has_commit()) {
      result.round = response.commit().round();
      result.global_step = response.commit().global_step();
      result.members.assign(response.commit().members().begin(), response.commit().members().end());
      committed = true;
    }
  }
  const absl::Status exchanged = schedule->Stop(committed);
  uploader.Stop();
  if (owns) options_.owner->Finish(member.run_id, header.round(), header.attempt());
  const absl::Status coordinator = FromGrpcStatus(stream->Finish());
  // Delivered, then the stream broke with no outcome (the coordinator died, or this member's
  // link): the round may have committed.
  const bool no_outcome = absl::IsUnavailable(coordinator) ||
                          absl::IsDeadlineExceeded(coordinator) || absl::IsCancelled(coordinator) ||
                          absl::IsUnknown(coordinator) || absl::IsInternal(coordinator);
  if (!committed && no_outcome && delivered.has_value()) {
    if (const std::optional<DigestPair> whole =
            WholeModelDigest(in, layout, header.first_chunk(), *delivered)) {
      unheard_ = Unheard{member.run_id, header.round(), in.fragment, in.offset, *whole};
    }
  }
  if (stale.has_value() && absl::IsFailedPrecondition(coordinator)) {
    return StaleRoundError(*stale, coordinator.message());
  }
  if (absl::Status failed = uploader.failure(); !failed.ok()) {
    // This node's range could not be averaged (an update that does not fit the codec): the
    // round is over, never the run (OUT_OF_RANGE would read as the run's end).
    return absl::AbortedError(
        absl::StrCat("round ", header.round(),
                     " aborted: this node's range cannot be averaged: ", failed.message()));
  }
  LOCALSGD_RETURN_IF_ERROR(round.Verdict(committed, coordinator, exchanged));
  // Every member's digests of this step agreed (finite, or the round would have aborted).
  const auto step = [&] { OuterStepInPlace(options_.outer, averaged, global, in.momentum); };
  if (in.held != nullptr) {
    in.held->Commit(result.round, result.global_step, step);
  } else {
    step();
  }
  return result;
}

std::optional<ExchangeResult> ShardedExchange::HearCommit(const SyncMember& member,
                                                          const ExchangeRound& in,
                                                          const absl::Status& refused) {
  // Kept until an answer decides it: a refusal that is not "committed" (the coordinator is
  // still restarting) says nothing of the round.
  const std::optional<v1::StaleRound> stale = StaleRoundOf(refused);
  if (!unheard_.has_value() || !stale.has_value()) return std::nullopt;
  // The update's fragment: this header's spans, or where it lies in the held model.
  const bool same_fragment = in.fragment == unheard_->fragment;
  const size_t size = averaged_.size();
  if (stale->run_ended() || unheard_->run_id != member.run_id ||
      stale->committed_round() != unheard_->round || in.round != unheard_->round ||
      (same_fragment ? in.global.size() != size
                     : in.held == nullptr || unheard_->offset + size > in.held->values().size())) {
    unheard_.reset();
    return std::nullopt;
  }
  const Unheard unheard = *unheard_;
  ModelClient coordinator(options_.coordinator, options_.token);
  const absl::StatusOr<v1::ModelHeader> model =
      coordinator.FetchHolders(member.run_id, in.timeout, keeps_momentum());
  if (!model.ok()) return std::nullopt;  // asked again on the next refusal
  unheard_.reset();
  if (model->round() != unheard.round || model->digest() != unheard.digest.with_momentum) {
    return std::nullopt;
  }
  absl::Span<float> global = in.global;
  absl::Span<float> momentum = in.momentum;
  if (!same_fragment) {
    global = absl::MakeSpan(in.held->values()).subspan(unheard.offset, size);
    if (!momentum.empty()) {
      momentum = absl::MakeSpan(in.held->momentum()).subspan(unheard.offset, size);
    }
  }
  const auto step = [&] { OuterStepInPlace(options_.outer, averaged_, global, momentum); };
  if (in.held != nullptr) {
    in.held->Commit(unheard.round, stale->global_step(), step);
  } else {
    step();
  }
  LogInfo(absl::StrCat("round ", unheard.round, " (fragment ", unheard.fragment,
                       ") committed while this node's stream was down: it applied the update it "
                       "had delivered (the coordinator's digest of the round is its own)"));
  if (!same_fragment) return std::nullopt;
  return ExchangeResult{unheard.round, stale->global_step(), {}};
}

}  // namespace localsgd
