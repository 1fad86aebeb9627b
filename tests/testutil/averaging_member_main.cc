// One node leader for bench/averaging_bench.py: serves a sharded data plane, joins the
// coordinator, waits for the run, uploads (node 0) or fetches the initial model, then syncs
// --rounds rounds of a random delta in the run's exchange mode and prints one line per round:
// "round R seconds T from S to E", T the seconds from calling Sync to its return, S and E
// those moments in Unix seconds (an aborted round is tried again: "round R aborted: ..."); then
// "cpu_seconds_per_round X", the process's user + system seconds per round over the rounds
// after the first (its "training" between rounds included), when it ran more than one; and
// last "final round R digest D", D the ModelDigest of the model (and momentum) it ends on.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/file_util.h"
#include "common/grpc_channel.h"
#include "common/mutex.h"
#include "common/process_tuning.h"
#include "common/status_util.h"
#include "exchange/checkpointer.h"
#include "exchange/codec.h"
#include "exchange/data_plane_server.h"
#include "exchange/held_model.h"
#include "exchange/model_client.h"
#include "exchange/model_digest.h"
#include "exchange/model_fetcher.h"
#include "exchange/sharded_exchange.h"
#include "exchange/star_exchange.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051", "Coordinator gRPC HOST:PORT.");
ABSL_FLAG(std::string, token, "", "Bearer token.");
ABSL_FLAG(std::string, node, "node-0", "Node name; node-0 uploads the initial model.");
ABSL_FLAG(int64_t, values, 1 << 20, "Floats in the parameter vector.");
ABSL_FLAG(int, rounds, 4, "Sync rounds to run.");
ABSL_FLAG(std::string, data_address, "127.0.0.1:0",
          "Where to serve the sharded data plane; empty: none.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Write checkpoints of the model this member holds to <dir>/<node>/checkpoint.bin at "
          "the run spec's checkpoint cadence, as a worker's --checkpoint_dir does; empty: none.");
ABSL_FLAG(int, stall_in_round, 0,
          "Fault injection for tests: in this round send the header and one chunk, print "
          "\"stalled\" and hang (to be killed mid-round). 0: never.");

namespace {

using localsgd::v1::Coordinator;

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "averaging_member: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

// User + system seconds of the whole process so far.
double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  localsgd::TuneProcess();
  absl::ParseCommandLine(argc, argv);
  const std::string token = absl::GetFlag(FLAGS_token);
  auto channel = localsgd::CreateStreamingChannel(absl::GetFlag(FLAGS_coordinator));
  auto coordinator = Coordinator::NewStub(channel);
  auto context = [&] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    localsgd::AddBearerToken(c.get(), token);
    return c;
  };

  // Who this member is, once it joined (the data plane checks its streams' tags with it).
  localsgd::Mutex identity_mu;
  localsgd::StreamTagCheck::Identity identity;
  // The model as a node leader holds it (its data plane serves it), checkpointed when asked.
  localsgd::HeldModel held;
  std::unique_ptr<localsgd::DataPlaneServer> data_plane;
  if (!absl::GetFlag(FLAGS_data_address).empty()) {
    localsgd::DataPlaneServer::Options options;
    options.address = absl::GetFlag(FLAGS_data_address);
    options.token = token;
    options.held = &held;
    options.identity = [&] {
      localsgd::MutexLock lock(&identity_mu);
      return identity;
    };
    auto started = localsgd::DataPlaneServer::Start(options);
    if (!started.ok()) return Fail("data plane", started.status());
    data_plane = *std::move(started);
  }

  localsgd::v1::JoinRequest join;
  join.mutable_identity()->set_node_name(absl::GetFlag(FLAGS_node));
  join.mutable_identity()->set_local_rank(0);
  join.mutable_identity()->set_local_world_size(1);
  join.set_pid(getpid());
  if (data_plane != nullptr) join.set_data_address(data_plane->address());
  localsgd::v1::JoinResponse joined;
  grpc::Status status = coordinator->Join(context().get(), join, &joined);
  if (!status.ok()) return Fail("join", localsgd::FromGrpcStatus(status));
  {
    localsgd::MutexLock lock(&identity_mu);
    identity = {joined.worker_id(), joined.member_credential()};
  }

  // Heartbeats keep the lease; the first RUNNING run they report is ours.
  std::atomic<bool> stop{false};
  localsgd::v1::RunInfo run;
  while (true) {
    localsgd::v1::HeartbeatRequest beat;
    beat.set_worker_id(joined.worker_id());
    beat.set_member_credential(joined.member_credential());
    localsgd::v1::HeartbeatResponse response;
    status = coordinator->Heartbeat(context().get(), beat, &response);
    if (!status.ok()) return Fail("heartbeat", localsgd::FromGrpcStatus(status));
    if (response.run().state() == localsgd::v1::RUN_STATE_RUNNING) {
      run = response.run();
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  std::thread heartbeat([&] {
    while (!stop.load()) {
      localsgd::v1::HeartbeatRequest beat;
      beat.set_worker_id(joined.worker_id());
      beat.set_member_credential(joined.member_credential());
      localsgd::v1::HeartbeatResponse response;
      coordinator->Heartbeat(context().get(), beat, &response);
      for (int i = 0; i < 20 && !stop.load(); ++i) absl::SleepFor(absl::Milliseconds(50));
    }
  });

  localsgd::ModelClient client(channel, token);
  const int64_t n = absl::GetFlag(FLAGS_values);
  std::vector<float> global;
  std::vector<float> momentum_at_start;
  int64_t first_round = 1;
  if (absl::GetFlag(FLAGS_node) == "node-0") {
    global.assign(static_cast<size_t>(n), 0.0f);
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& x : global) x = dist(rng);
    localsgd::ChunkLayout layout = localsgd::ChunkLayout::ForBytes(n, run.spec().chunk_bytes());
    absl::Status s = client
                         .InitModel(run.run_id(), joined.worker_id(), joined.member_credential(),
                                    global, layout, absl::Seconds(120))
                         .status();
    if (!s.ok()) return Fail("init model", s);
  } else {
    // From the node leaders that hold it (node-0, the uploader, at first).
    const localsgd::ModelFetcher fetcher({&client, token, nullptr, joined.worker_id()});
    while (true) {
      absl::StatusOr<localsgd::ModelFetcher::Fetched> fetched =
          fetcher.Fetch(run.run_id(), absl::Seconds(120), /*include_momentum=*/true);
      if (fetched.ok()) {
        global = std::move(fetched->model.values);
        if (!fetched->model.momentum.empty()) {
          momentum_at_start = std::move(fetched->model.momentum);
        }
        first_round = fetched->model.round + 1;  // a late member goes on from the committed round
        break;
      }
      // Not yet held (node-0 is installing what it uploaded), or its holder moved on.
      if (!absl::IsFailedPrecondition(fetched.status()) && !absl::IsUnavailable(fetched.status())) {
        stop.store(true);
        heartbeat.join();
        return Fail("fetch model", fetched.status());
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  const std::string credential = joined.member_credential();
  localsgd::SyncMember member{run.run_id(),
                              joined.worker_id(),
                              run.spec().codec(),
                              1.0,
                              1,
                              [credential] { return credential; }};
  const bool sharded = run.spec().exchange() == localsgd::v1::EXCHANGE_SHARDED;
  const localsgd::v1::OuterOptimizerSpec& outer_spec = run.spec().outer_optimizer();
  const localsgd::OuterOptimizer outer{outer_spec.lr(), outer_spec.momentum(),
                                       outer_spec.nesterov()};
  std::vector<float> momentum(outer.momentum != 0 ? global.size() : 0, 0.0f);
  if (momentum_at_start.size() == momentum.size()) momentum = std::move(momentum_at_start);
  std::unique_ptr<localsgd::Checkpointer> checkpointer;
  if (const std::string dir = absl::GetFlag(FLAGS_checkpoint_dir); !dir.empty()) {
    const std::string folder = absl::StrCat(dir, "/", absl::GetFlag(FLAGS_node));
    if (absl::Status made = localsgd::MakeDirectories(folder); !made.ok()) {
      return Fail("checkpoint_dir", made);
    }
    checkpointer = std::make_unique<localsgd::Checkpointer>(
        &held, localsgd::Checkpointer::Options{
                   absl::StrCat(folder, "/checkpoint.bin"), run.spec().checkpoint_every_rounds(),
                   run.spec().checkpoint_share(),
                   localsgd::ChunkLayout::ForBytes(n, run.spec().chunk_bytes()).chunk_values,
                   [](const localsgd::Checkpointer::Written& written) {
                     std::printf("checkpoint of round %lld took %.3f s\n",
                                 static_cast<long long>(written.round),
                                 absl::ToDoubleSeconds(written.took));
                     std::fflush(stdout);
                   }});
    held.set_on_change([&](const std::string& run_id, int64_t round, int64_t step) {
      checkpointer->Offer(run_id, round, step);
    });
  }
  held.Install(run.run_id(), first_round - 1, (first_round - 1) * 8, std::move(global),
               std::move(momentum));
  std::unique_ptr<localsgd::Exchange> exchange;
  if (sharded) {
    localsgd::ShardedExchange::Options sharded_options;
    sharded_options.coordinator = channel;
    sharded_options.token = token;
    sharded_options.owner = data_plane != nullptr ? data_plane->owner() : nullptr;
    sharded_options.inbox = data_plane != nullptr ? data_plane->inbox() : nullptr;
    sharded_options.outer = outer;
    exchange = std::make_unique<localsgd::ShardedExchange>(sharded_options);
  } else {
    exchange = std::make_unique<localsgd::StarExchange>(channel, token);
  }
  // The "training" between rounds is a fixed random step, drawn once (drawing it anew each
  // round would keep this member's CPU busy while the others are already in the round), of at
  // most 2^20 values repeated over the model: a model-sized one would add the model's size to
  // this member's memory, which the benchmarks read as the member's own.
  std::vector<float> params(held.values().size());
  std::vector<float> step(std::min<size_t>(params.size(), size_t{1} << 20));
  std::mt19937 rng(std::hash<std::string>()(joined.worker_id()));
  std::normal_distribution<float> dist(0.0f, 0.01f);
  for (float& x : step) x = dist(rng);
  double cpu_start = -1;
  for (int64_t round = first_round; round < first_round + absl::GetFlag(FLAGS_rounds); ++round) {
    if (round == absl::GetFlag(FLAGS_stall_in_round)) {
      auto stub = localsgd::v1::Averaging::NewStub(channel);
      grpc::ClientContext stall_context;
      localsgd::AddBearerToken(&stall_context, token);
      auto stream = stub->Sync(&stall_context);
      localsgd::v1::SyncRequest request;
      localsgd::v1::SyncHeader* header = request.mutable_header();
      header->set_run_id(run.run_id());
      header->set_round(round);
      header->set_member_id(joined.worker_id());
      header->set_member_credential(joined.member_credential());
      header->set_vector_length(n);
      header->set_codec(run.spec().codec());
      header->set_weight(1);
      header->set_num_workers(1);
      stream->Write(request);
      localsgd::v1::SyncResponse response;
      stream->Read(&response);  // in the round now (sharded: with the layout)
      if (sharded) {
        std::printf("stalled\n");  // an owner that never averages its range
        std::fflush(stdout);
        while (true) pause();
      }
      const localsgd::ChunkLayout layout{n, response.header().chunk_values()};
      std::vector<float> first_delta(static_cast<size_t>(layout.size(0)));
      for (size_t i = 0; i < first_delta.size(); ++i) first_delta[i] = step[i % step.size()];
      request.mutable_chunk()->set_index(0);
      localsgd::Encode(run.spec().codec(), absl::MakeConstSpan(first_delta),
                       request.mutable_chunk()->mutable_data());
      stream->Write(request);
      std::printf("stalled\n");
      std::fflush(stdout);
      while (true) pause();
    }
    if (round > first_round && cpu_start < 0) cpu_start = CpuSeconds();  // after the warm-up
    for (size_t i = 0; i < params.size(); ++i) {
      params[i] = held.values()[i] + step[i % step.size()];
    }
    absl::Time start = absl::Now();
    localsgd::ExchangeRound exchange_round{round,
                                           round * 8,
                                           params,
                                           absl::MakeSpan(held.values()),
                                           absl::MakeSpan(held.momentum()),
                                           absl::Seconds(300)};
    exchange_round.held = &held;
    absl::StatusOr<localsgd::ExchangeResult> result = exchange->Run(member, exchange_round);
    if (absl::IsAborted(result.status()) || absl::IsCancelled(result.status()) ||
        absl::IsUnavailable(result.status())) {
      // The round ended without an update (an owner died, the coordinator is restarting):
      // keep the weights, try again.
      if (absl::IsUnavailable(result.status())) absl::SleepFor(absl::Milliseconds(200));
      std::printf("round %lld aborted: %s\n", static_cast<long long>(round),
                  result.status().ToString().c_str());
      std::fflush(stdout);
      --round;
      continue;
    }
    if (!result.ok()) {
      stop.store(true);
      heartbeat.join();
      return Fail(absl::StrCat("round ", round), result.status());
    }
    const absl::Time end = absl::Now();
    std::printf("round %lld seconds %.6f from %.6f to %.6f\n", static_cast<long long>(round),
                absl::ToDoubleSeconds(end - start),
                absl::ToDoubleSeconds(start - absl::UnixEpoch()),
                absl::ToDoubleSeconds(end - absl::UnixEpoch()));
    std::fflush(stdout);
  }
  if (checkpointer != nullptr) {
    if (absl::Status s = checkpointer->Flush(absl::Minutes(5)); !s.ok()) {
      return Fail("checkpoint", s);
    }
  }
  if (cpu_start >= 0) {
    std::printf("cpu_seconds_per_round %.4f\n",
                (CpuSeconds() - cpu_start) / (absl::GetFlag(FLAGS_rounds) - 1));
  }
  std::printf(
      "final round %lld digest %016llx\n", static_cast<long long>(held.round()),
      static_cast<unsigned long long>(
          localsgd::ModelDigest(held.values(), held.momentum(),
                                localsgd::ChunkLayout::ForBytes(n, run.spec().chunk_bytes()))
              .with_momentum));
  std::fflush(stdout);
  stop.store(true);
  heartbeat.join();
  localsgd::v1::LeaveRequest leave;
  leave.set_worker_id(joined.worker_id());
  leave.set_member_credential(joined.member_credential());
  localsgd::v1::LeaveResponse left;
  coordinator->Leave(context().get(), leave, &left);
  return 0;
}
