#include "exchange/sharded_client.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/grpc_channel.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "exchange/chunk_wire.h"
#include "exchange/codec.h"
#include "exchange/received_chunk.h"
#include "exchange/ring_member.h"
#include "exchange/write_batch.h"

namespace localsgd {
namespace {

// The one writer of the coordinator stream once the layout is known: this node's averaged
// chunks (as an owner) and its "delivered". Producers only queue, so the owner's reactors
// never block on the coordinator.
class Uploader : public MeanSink {
 public:
  Uploader(SyncStream* stream, grpc::ClientContext* context)
      : stream_(stream), context_(context), thread_([this] { Run(); }) {}
  ~Uploader() override { Stop(); }

  void OnMean(int, std::shared_ptr<const OwnerMean> mean) override {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(mean));
  }
  void OnFailure(const absl::Status& status) override {
    {
      MutexLock lock(&mu_);
      if (failure_.ok()) failure_ = status;
    }
    context_->TryCancel();  // the coordinator sees this owner leave and aborts the round
  }
  void Deliver() {
    MutexLock lock(&mu_);
    deliver_ = true;
  }
  // Tells the coordinator this member's exchange with `owner_id` failed (it aborts the round).
  void Unreachable(const std::string& owner_id, const absl::Status& why) {
    auto message = std::make_shared<v1::SyncRequest>();
    message->mutable_unreachable()->set_owner_id(owner_id);
    message->mutable_unreachable()->set_reason(why.ToString());
    MutexLock lock(&mu_);
    reports_.push_back(std::move(message));
  }
  // Sends nothing more; waits for the write in flight.
  void Stop() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }
  absl::Status failure() {
    MutexLock lock(&mu_);
    return failure_;
  }

 private:
  void Run() {
    v1::SyncRequest request;
    while (true) {
      std::shared_ptr<const OwnerMean> mean;
      bool more = false;  // another mean is queued behind this one
      bool deliver = false;
      {
        MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](Uploader* u) {
              return u->stop_ || !u->queue_.empty() || u->deliver_ || !u->reports_.empty();
            },
            this));
        if (stop_) return;
        if (!reports_.empty()) {
          request = *reports_.front();
          reports_.pop_front();
        } else if (!queue_.empty()) {
          mean = std::move(queue_.front());
          queue_.pop_front();
          more = !queue_.empty();
        } else {
          deliver = true;
          deliver_ = false;
        }
      }
      if (mean != nullptr) {
        // The owner's chunk itself, lent to the request for this write and taken back after
        // it (its bytes are copied only by the serialiser, not into the request first).
        request.unsafe_arena_set_allocated_mean(const_cast<v1::Chunk*>(&mean->message().mean()));
        const bool written = stream_->Write(
            request, batch_.Next(static_cast<int64_t>(request.ByteSizeLong()), more));
        request.unsafe_arena_release_mean();
        if (!written) return;  // the stream ended: the reader sees why
        continue;
      }
      if (deliver) request.mutable_delivered();  // else: a report, copied above
      if (!stream_->Write(request)) return;
    }
  }

  SyncStream* const stream_;
  grpc::ClientContext* const context_;
  Mutex mu_;
  std::deque<std::shared_ptr<const OwnerMean>> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<const v1::SyncRequest>> reports_ ABSL_GUARDED_BY(mu_);
  bool deliver_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  WriteBatch batch_;  // used by the writer thread only
  std::thread thread_;
};

// This member's exchange with its own ShardOwner, in process: no serialisation, no socket.
class LocalReduceStream : public ReduceStream {
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
        +[](LocalReduceStream* s)
             ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->closed_ || !s->queue_.empty(); },
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

// The layout in a RoundHeader, checked against this member's vector.
absl::Status CheckLayout(const v1::RoundHeader& header, const std::string& member_id,
                         const ChunkLayout& layout) {
  if (header.exchange() != v1::EXCHANGE_SHARDED) {
    return absl::InternalError(
        "the coordinator answered with a star round (the run's exchange "
        "is EXCHANGE_STAR)");
  }
  if (header.chunk_values() <= 0 || layout.num_chunks() != header.num_chunks() ||
      header.weights_size() != header.members_size() || header.shards_size() == 0) {
    return absl::InternalError("the round's layout does not match the vector");
  }
  if (std::find(header.members().begin(), header.members().end(), member_id) ==
      header.members().end()) {
    return absl::InternalError("the round's layout does not list this member");
  }
  int next = 0;
  for (const v1::ShardRange& shard : header.shards()) {
    if (shard.begin_chunk() != next || shard.end_chunk() <= shard.begin_chunk()) {
      return absl::InternalError("the round's shards do not tile the vector");
    }
    next = shard.end_chunk();
  }
  if (next != layout.num_chunks()) {
    return absl::InternalError("the round's shards do not tile the vector");
  }
  return absl::OkStatus();
}

// A ring layout: member i owns range i, whose mean the coordinator relays to member i + 1.
absl::Status CheckRing(const v1::RoundHeader& header) {
  const int n = header.members_size();
  if (n < 2 || header.shards_size() != n || header.codec() != v1::CODEC_FP32) {
    return absl::InternalError("the ring's layout does not give each member one fp32 range");
  }
  for (int i = 0; i < n; ++i) {
    if (header.shards(i).owner_id() != header.members(i) ||
        header.shards(i).relayed_to() != header.members((i + 1) % n)) {
      return absl::InternalError("the ring's ranges are not the members' in slot order");
    }
  }
  return absl::OkStatus();
}

}  // namespace

ShardedClient::ShardedClient(Options options)
    : options_(std::move(options)), stub_(v1::Averaging::NewStub(options_.coordinator)) {}

std::shared_ptr<grpc::Channel> ShardedClient::PeerChannel(const std::string& address) {
  MutexLock lock(&mu_);
  std::shared_ptr<grpc::Channel>& channel = peers_[address];
  if (channel == nullptr) {
    channel = CreateStreamingChannel(address, options_.peer_credentials != nullptr
                                                  ? options_.peer_credentials
                                                  : grpc::InsecureChannelCredentials());
  }
  return channel;
}

absl::StatusOr<StarClient::SyncResult> ShardedClient::Sync(
    const StarClient::Member& member, const OuterOptimizer& outer, int64_t round, int64_t step,
    absl::Span<const float> params, absl::Span<float> global, absl::Span<float> momentum,
    absl::Duration timeout) {
  if (params.size() != global.size() || (outer.momentum != 0 && momentum.size() != global.size())) {
    return absl::InvalidArgumentError("params, global and momentum differ in length");
  }
  auto context = AuthorizedContext(options_.token, timeout);
  std::unique_ptr<SyncStream> stream = stub_->Sync(context.get());
  // The layout comes once every member has arrived (or at the deadline).
  LOCALSGD_ASSIGN_OR_RETURN(v1::RoundHeader begun,
                            BeginSync(stream.get(), context.get(), member, round, step,
                                      static_cast<int64_t>(params.size())));
  const v1::RoundHeader& layout_header = begun;
  v1::SyncResponse response;
  const ChunkLayout layout{static_cast<int64_t>(params.size()), layout_header.chunk_values()};
  if (absl::Status s = CheckLayout(layout_header, member.member_id, layout); !s.ok()) {
    context->TryCancel();
    stream->Finish();
    return s;
  }

  Uploader uploader(stream.get(), context.get());
  const bool ring = layout_header.ring();
  const int self = static_cast<int>(
      std::find(layout_header.members().begin(), layout_header.members().end(), member.member_id) -
      layout_header.members().begin());
  if (ring) {
    absl::Status usable =
        options_.inbox != nullptr
            ? CheckRing(layout_header)
            : absl::InternalError("the layout puts a member without a data plane in a ring");
    if (!usable.ok()) {
      uploader.Stop();
      context->TryCancel();
      stream->Finish();
      return usable;
    }
  }
  bool owns = false;
  for (const v1::ShardRange& shard : layout_header.shards()) {
    if (ring) break;  // no ShardOwner: the ring's sums end at this member itself
    if (shard.owner_id() != member.member_id) continue;
    if (options_.owner == nullptr) {
      context->TryCancel();
      stream->Finish();
      return absl::InternalError("the layout gives a range to a member without a data plane");
    }
    ShardOwner::Assignment assignment;
    assignment.run_id = member.run_id;
    assignment.round = layout_header.round();
    assignment.attempt = layout_header.attempt();
    assignment.members.assign(layout_header.members().begin(), layout_header.members().end());
    assignment.weights.assign(layout_header.weights().begin(), layout_header.weights().end());
    assignment.layout = layout;
    assignment.begin_chunk = shard.begin_chunk();
    assignment.end_chunk = shard.end_chunk();
    assignment.codec = layout_header.codec();
    const auto relayed =
        std::find(assignment.members.begin(), assignment.members.end(), shard.relayed_to());
    if (!shard.relayed_to().empty() && relayed != assignment.members.end()) {
      assignment.relayed_slot = static_cast<int>(relayed - assignment.members.begin());
    }
    if (absl::Status s = options_.owner->Install(std::move(assignment), &uploader); !s.ok()) {
      uploader.Stop();
      context->TryCancel();
      stream->Finish();
      return s;
    }
    owns = true;
  }

  // One exchange per owner: a writer sends this member's delta for the owner's range while a
  // reader takes the averaged chunks. Each is decoded into `averaged` as it arrives; the
  // commit steps `global` and `momentum` by it in place (one pass, no model-sized copy). Reused
  // round after round: a fresh model-sized buffer costs a page fault per 4 KiB. (A
  // thread_local is not captured by the lambdas below: they name the buffer through this
  // span.)
  thread_local std::vector<float> averaged_buffer;
  averaged_buffer.resize(params.size());
  const absl::Span<float> averaged = absl::MakeSpan(averaged_buffer);
  const int shards = layout_header.shards_size();
  std::atomic<int> received{0};
  std::vector<absl::Status> shard_status(static_cast<size_t>(shards));
  std::vector<std::unique_ptr<grpc::ClientContext>> shard_contexts;
  for (int s = 0; s < shards; ++s) {
    shard_contexts.push_back(AuthorizedContext(options_.token, timeout));
  }
  std::vector<std::shared_ptr<LocalReduceStream>> local_streams(static_cast<size_t>(shards));
  v1::ReduceHeader reduce_header;
  reduce_header.set_run_id(member.run_id);
  reduce_header.set_round(layout_header.round());
  reduce_header.set_member_id(member.member_id);
  reduce_header.set_attempt(layout_header.attempt());
  // Decodes averaged chunk `c` of `shard` into `averaged` with `decode` (into the chunk's
  // values); `got` marks the chunks already here.
  auto take_chunk = [&](const v1::ShardRange& shard, int c, std::vector<bool>& got,
                        const auto& decode) -> absl::Status {
    if (c < shard.begin_chunk() || c >= shard.end_chunk() || got[c - shard.begin_chunk()]) {
      return absl::InternalError(
          absl::StrCat("owner ", shard.owner_id(), " sent an unexpected chunk ", c));
    }
    LOCALSGD_RETURN_IF_ERROR(decode(averaged.subspan(static_cast<size_t>(layout.begin(c)),
                                                     static_cast<size_t>(layout.size(c)))));
    got[c - shard.begin_chunk()] = true;
    if (++received == layout.num_chunks()) uploader.Deliver();
    return absl::OkStatus();
  };
  auto take_mean = [&](const v1::ShardRange& shard, const v1::Chunk& chunk,
                       std::vector<bool>& got) {
    return take_chunk(shard, chunk.index(), got, [&](absl::Span<float> out) {
      return Decode(layout_header.codec(), chunk.data(), out);
    });
  };
  // The chunks of each range already here. A range relayed to this member through the
  // coordinator arrives on the coordinator's stream (read below, after the exchanges start);
  // its owner's stream then carries no mean.
  std::vector<std::vector<bool>> got_by_shard;
  for (const v1::ShardRange& shard : layout_header.shards()) {
    got_by_shard.emplace_back(static_cast<size_t>(shard.end_chunk() - shard.begin_chunk()), false);
  }
  auto relayed_here = [&](int s) {
    return layout_header.shards(s).relayed_to() == member.member_id;
  };
  auto all_got = [](const v1::ShardRange& shard, const std::vector<bool>& got) {
    return std::find(got.begin(), got.end(), false) == got.end()
               ? absl::OkStatus()
               : absl::InternalError(absl::StrCat("owner ", shard.owner_id(),
                                                  " ended its stream before its whole range"));
  };
  // This member's own range, with its own ShardOwner in process.
  auto exchange_locally = [&](int s) -> absl::Status {
    const v1::ShardRange& shard = layout_header.shards(s);
    std::shared_ptr<LocalReduceStream> stream = local_streams[s];
    bool waiting = false;
    LOCALSGD_ASSIGN_OR_RETURN(int64_t session,
                              options_.owner->Attach(reduce_header, stream, &waiting));
    std::thread writer([&] {
      v1::Chunk chunk;
      for (int c = shard.begin_chunk(); c < shard.end_chunk(); ++c) {
        EncodeDeltaChunk(member.codec, layout, c, params, global, &chunk);
        if (!options_.owner->AddChunk(session, chunk).ok()) return;
      }
    });
    absl::Status problem;
    std::vector<bool>& got = got_by_shard[s];
    while (std::shared_ptr<const OwnerMean> reply = stream->Next()) {
      problem = take_mean(shard, reply->message().mean(), got);
      if (!problem.ok()) break;
    }
    if (!problem.ok()) stream->Close(absl::CancelledError("stopped reading"));
    writer.join();
    options_.owner->Detach(session);
    if (!problem.ok()) return problem;
    LOCALSGD_RETURN_IF_ERROR(stream->status());
    return all_got(shard, got);
  };
  auto exchange = [&](int s) -> absl::Status {
    const v1::ShardRange& shard = layout_header.shards(s);
    if (local_streams[s] != nullptr) return exchange_locally(s);
    std::shared_ptr<grpc::Channel> channel = PeerChannel(shard.address());
    grpc::ClientContext* shard_context = shard_contexts[s].get();
    // A Reduce stream of raw buffers, so that each delta chunk goes out in the bytes it was
    // encoded into (ChunkMessageBuffer) where the generated stub's serialiser would copy it.
    const grpc::internal::RpcMethod method(kDataPlaneReduceMethod,
                                           grpc::internal::RpcMethod::BIDI_STREAMING, channel);
    std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> reduce(
        grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
            channel.get(), method, shard_context));
    std::thread writer([&] {
      v1::ReduceRequest request;
      *request.mutable_header() = reduce_header;
      if (!reduce->Write(SerializedBuffer(request))) return;
      WriteBatch batch;
      for (int c = shard.begin_chunk(); c < shard.end_chunk(); ++c) {
        v1::Chunk chunk;
        EncodeDeltaChunk(member.codec, layout, c, params, global, &chunk);
        grpc::ByteBuffer message =
            ChunkMessageBuffer(v1::ReduceRequest::kChunkFieldNumber, std::move(chunk));
        const bool more = c + 1 < shard.end_chunk();  // the next is encoded at once
        if (!reduce->Write(message, batch.Next(static_cast<int64_t>(message.Length()), more))) {
          return;
        }
      }
      reduce->WritesDone();
    });
    absl::Status problem;
    std::vector<bool>& got = got_by_shard[s];
    grpc::ByteBuffer wire;
    v1::ReduceResponse reply;
    while (reduce->Read(&wire)) {
      if (!grpc::SerializationTraits<v1::ReduceResponse>::Deserialize(&wire, &reply).ok()) {
        problem = absl::InternalError(
            absl::StrCat("owner ", shard.owner_id(), " sent what does not parse as a mean"));
      } else {
        problem = relayed_here(s)
                      ? absl::InternalError(absl::StrCat("owner ", shard.owner_id(),
                                                         " sent a mean the coordinator relays"))
                      : take_mean(shard, reply.mean(), got);
      }
      if (!problem.ok()) break;
    }
    if (!problem.ok()) shard_context->TryCancel();
    writer.join();
    grpc::Status status = reduce->Finish();
    if (!problem.ok()) return problem;
    if (!status.ok()) {
      absl::Status error = FromGrpcStatus(status);
      return absl::Status(error.code(), absl::StrCat("owner ", shard.owner_id(), " at ",
                                                     shard.address(), ": ", error.message()));
    }
    return relayed_here(s) ? absl::OkStatus() : all_got(shard, got);
  };
  for (int s = 0; s < shards; ++s) {
    if (owns && layout_header.shards(s).owner_id() == member.member_id) {
      local_streams[s] = std::make_shared<LocalReduceStream>();
    }
  }
  std::unique_ptr<RingMember> ring_member;
  if (ring) {
    RingMember::Setup setup;
    setup.header = &layout_header;
    setup.pass_header = reduce_header;
    setup.layout = &layout;
    setup.self = self;
    setup.params = params;
    setup.global = global;
    setup.succ_channel = PeerChannel(layout_header.shards((self + 1) % shards).address());
    setup.context = AuthorizedContext(options_.token, timeout);
    setup.inbox = options_.inbox;
    setup.sink = &uploader;
    setup.unreachable = [&uploader](const std::string& id, const absl::Status& why) {
      uploader.Unreachable(id, why);
    };
    // A ring's means are fp32 (CheckRing), read where gRPC received them.
    setup.take_mean = [&](int s, const ReceivedChunk& mean) {
      return take_chunk(layout_header.shards(s), mean.index(), got_by_shard[s],
                        [&mean](absl::Span<float> out) { return mean.DecodeFp32(out); });
    };
    options_.inbox->Follow(member.run_id, layout_header.round(), layout_header.attempt(),
                           layout_header.members((self + shards - 1) % shards));
    ring_member = std::make_unique<RingMember>(std::move(setup));
  }
  std::vector<std::thread> exchanges;
  for (int s = 0; s < shards && !ring; ++s) {
    exchanges.emplace_back([&, s] {
      shard_status[s] = exchange(s);
      // This member cannot complete the round: the coordinator aborts it, naming the owner
      // (unless the round already ended, which cancelled this exchange).
      if (!shard_status[s].ok() && !absl::IsCancelled(shard_status[s])) {
        uploader.Unreachable(layout_header.shards(s).owner_id(), shard_status[s]);
      }
    });
  }

  // The coordinator's side: drop notices, then the commit (or the end of the round).
  StarClient::SyncResult result;
  bool committed = false;
  absl::Status relay_problem;
  while (stream->Read(&response)) {
    if (response.has_update()) {
      // A mean of a range relayed to this member: the owner's bytes, through the coordinator.
      if (!relay_problem.ok()) continue;  // said once; the round aborts
      const int index = response.update().index();
      int s = 0;
      while (s < shards && index >= layout_header.shards(s).end_chunk()) ++s;
      relay_problem = s < shards && relayed_here(s)
                          ? take_mean(layout_header.shards(s), response.update(), got_by_shard[s])
                          : absl::InternalError(absl::StrCat("the coordinator relayed chunk ",
                                                             index, ", not relayed here"));
      if (relay_problem.ok() && ring_member != nullptr) {
        ring_member->PassOn(std::move(*response.mutable_update()));
      }
      if (!relay_problem.ok()) {
        uploader.Unreachable(layout_header.shards(std::min(s, shards - 1)).owner_id(),
                             relay_problem);
      }
    } else if (response.has_dropped()) {
      if (owns) options_.owner->Drop(response.dropped().member_id());
    } else if (response.has_commit()) {
      result.round = response.commit().round();
      result.global_step = response.commit().global_step();
      result.members.assign(response.commit().members().begin(), response.commit().members().end());
      committed = true;
    }
  }
  if (!committed) {
    for (auto& shard_context : shard_contexts) shard_context->TryCancel();
    for (auto& local : local_streams) {
      if (local != nullptr) local->Close(absl::CancelledError("the round ended"));
    }
  }
  for (std::thread& t : exchanges) t.join();
  if (ring_member != nullptr) ring_member->Stop();
  uploader.Stop();
  if (owns) {
    options_.owner->Finish(member.run_id, layout_header.round(), layout_header.attempt());
  }
  const grpc::Status status = stream->Finish();
  LOCALSGD_RETURN_IF_ERROR(uploader.failure());
  if (!committed) {
    // The coordinator's verdict first (ABORTED: an owner died, ...); when this member left the
    // round itself because an owner failed it, the round is over for it all the same: keep
    // the local weights and sync at the next boundary.
    if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
      return FromGrpcStatus(status);
    }
    if (!relay_problem.ok()) {
      return absl::AbortedError(absl::StrCat(
          "round ", layout_header.round(), " aborted for this member: ", relay_problem.message()));
    }
    for (const absl::Status& s : shard_status) {
      if (!s.ok() && !absl::IsCancelled(s)) {
        return absl::AbortedError(absl::StrCat("round ", layout_header.round(),
                                               " aborted for this member: ", s.message()));
      }
    }
    return status.ok() ? absl::InternalError("the round ended without a commit")
                       : FromGrpcStatus(status);
  }
  if (received.load() != layout.num_chunks()) {
    // The coordinator committed without this member (it was dropped): it adopts the model.
    return absl::AbortedError("the round committed without this member's whole update");
  }
  // The coordinator committed the same step computed from the same bytes (finite, or it
  // would have aborted the round).
  OuterStepInPlace(outer, averaged, global, momentum);
  return result;
}

}  // namespace localsgd
