// A late joiner's fetch of the run's model (docs/design.md, "Where the model lives"), both ways
// in one sitting: a coordinator and two node leaders (in this process, on loopback ports) sync
// fp32 rounds of --values floats as fast as they can, first a star run (the coordinator keeps
// the model, as every run's before the coordinator lost it: the fetch is its FetchModel), then a
// sharded run (the coordinator keeps no copy: ModelFetcher::Fetch takes a range from each holder,
// checked against the coordinator's digest); meanwhile a joiner fetches the committed model
// --repeats times. Prints one line per fetch ("fetch from SOURCE seconds S
// rounds_committed_meanwhile N") and each way's median.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_channel.h"
#include "coordinator/coordinator_server.h"
#include "exchange/data_plane_server.h"
#include "exchange/held_model.h"
#include "exchange/model_client.h"
#include "exchange/model_fetcher.h"
#include "exchange/sharded_exchange.h"
#include "exchange/star_exchange.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"
#include "worker/node_leader.h"

ABSL_FLAG(int64_t, values, 250'000'000, "Floats in the model (250M: 1,000 MB).");
ABSL_FLAG(int, repeats, 2, "Fetches each way.");
ABSL_FLAG(int, warmup_rounds, 2, "Rounds committed before the first fetch.");

namespace localsgd {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A run of `exchange_kind` with its own coordinator: the joiner's fetch times, empty on an
// error (printed).
std::vector<double> FetchTimes(v1::Exchange exchange_kind) {
  CoordinatorServer::Options options;
  options.grpc_address = "127.0.0.1:0";
  options.http_address = "";
  options.lease_timeout = absl::Hours(1);  // no heartbeats in this bench
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", server.status().ToString().c_str());
    return {};
  }
  auto channel = grpc::CreateCustomChannel(
      (*server)->grpc_address(), grpc::InsecureChannelCredentials(), StreamingChannelArguments());
  auto stub = v1::Coordinator::NewStub(channel);
  auto call = [](auto method) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    return method(&context);
  };
  // Two node leaders, each with a data plane serving the model it holds.
  constexpr int kLeaders = 2;
  std::vector<std::string> members(kLeaders), credentials(kLeaders);
  std::vector<std::unique_ptr<HeldModel>> held;
  std::vector<std::unique_ptr<DataPlaneServer>> planes;
  for (int i = 0; i < kLeaders; ++i) {
    held.push_back(std::make_unique<HeldModel>());
    DataPlaneServer::Options plane;
    plane.held = held.back().get();
    plane.identity = [&, i] { return StreamTagCheck::Identity{members[i], credentials[i]}; };
    absl::StatusOr<std::unique_ptr<DataPlaneServer>> started = DataPlaneServer::Start(plane);
    if (!started.ok()) {
      std::fprintf(stderr, "data plane: %s\n", started.status().ToString().c_str());
      return {};
    }
    planes.push_back(*std::move(started));
    v1::JoinRequest join;
    join.mutable_identity()->set_node_name(absl::StrCat("n", i));
    join.mutable_identity()->set_local_world_size(1);
    join.set_data_address(planes.back()->address());
    v1::JoinResponse joined;
    if (grpc::Status s = call([&](grpc::ClientContext* c) { return stub->Join(c, join, &joined); });
        !s.ok()) {
      std::fprintf(stderr, "join: %s\n", s.error_message().c_str());
      return {};
    }
    members[i] = joined.worker_id();
    credentials[i] = joined.member_credential();
  }
  v1::StartRunRequest start;
  start.mutable_spec()->mutable_model()->set_custom("bench");
  start.mutable_spec()->set_exchange(exchange_kind);
  start.mutable_spec()->set_min_workers(kLeaders);
  start.mutable_spec()->set_total_steps(1'000'000'000);
  start.mutable_spec()->set_round_deadline_seconds(300);
  v1::StartRunResponse started;
  if (grpc::Status s =
          call([&](grpc::ClientContext* c) { return stub->StartRun(c, start, &started); });
      !s.ok()) {
    std::fprintf(stderr, "start: %s\n", s.error_message().c_str());
    return {};
  }
  const v1::RunInfo& run = started.run();
  const int64_t n = absl::GetFlag(FLAGS_values);
  const ChunkLayout layout = ChunkLayout::ForBytes(n, run.spec().chunk_bytes());
  ModelClient models(channel, "");
  std::atomic<bool> done{false};
  std::atomic<int64_t> committed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kLeaders; ++i) {
    threads.emplace_back([&, i] {
      std::unique_ptr<Exchange> exchange;
      if (exchange_kind == v1::EXCHANGE_SHARDED) {
        ShardedExchange::Options sharded;
        sharded.coordinator = channel;
        sharded.owner = planes[i]->owner();
        sharded.inbox = planes[i]->inbox();
        exchange = std::make_unique<ShardedExchange>(sharded);
      } else {
        exchange = std::make_unique<StarExchange>(channel, "");
      }
      ModelFetcher fetcher({&models, "", nullptr, members[i]});
      SyncMember member{
          run.run_id(), members[i], v1::CODEC_FP32, 1, 1, [&, i] { return credentials[i]; }};
      NodeLeader leader(&models, exchange.get(), member, layout, absl::Seconds(600), FragmentPlan(),
                        held[i].get(), &fetcher);
      std::vector<float> params(static_cast<size_t>(n), 0.0f);
      if (absl::Status s = leader.Start(absl::MakeSpan(params)); !s.ok()) {
        std::fprintf(stderr, "start %d: %s\n", i, s.ToString().c_str());
        std::exit(1);
      }
      for (int64_t step = 1; !done; ++step) {
        const float nudge = 1e-3f * static_cast<float>(i + 1);
        for (float& v : params) v += nudge;
        absl::Status s = leader.Sync(absl::MakeSpan(params), step);
        if (s.ok() && i == 0) ++committed;
        if (!s.ok() && !done) std::fprintf(stderr, "sync %d: %s\n", i, s.ToString().c_str());
      }
    });
  }
  while (committed < absl::GetFlag(FLAGS_warmup_rounds)) absl::SleepFor(absl::Milliseconds(50));

  ModelFetcher joiner({&models, "", nullptr, "joiner"});
  std::vector<double> times;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    const int64_t before = committed;
    const absl::Time t = absl::Now();
    // A star run's model from the coordinator's FetchModel; a sharded run's from its holders.
    absl::StatusOr<ModelFetcher::Fetched> fetched;
    if (exchange_kind == v1::EXCHANGE_STAR) {
      absl::StatusOr<ModelClient::Model> model =
          models.FetchModel(run.run_id(), absl::Seconds(600));
      if (model.ok()) {
        fetched = ModelFetcher::Fetched{*std::move(model), "the coordinator"};
      } else {
        fetched = model.status();
      }
    } else {
      fetched = joiner.Fetch(run.run_id(), absl::Seconds(600), false);
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - t);
    if (!fetched.ok()) {
      std::fprintf(stderr, "fetch: %s\n", fetched.status().ToString().c_str());
      times.clear();
      break;
    }
    times.push_back(seconds);
    std::printf("fetch from %s seconds %.3f rounds_committed_meanwhile %ld\n",
                fetched->source.c_str(), seconds, static_cast<long>(committed - before));
    std::fflush(stdout);
  }
  done = true;
  v1::StopRunRequest stop;
  v1::StopRunResponse stopped;
  call([&](grpc::ClientContext* c) { return stub->StopRun(c, stop, &stopped); });
  for (std::thread& t : threads) t.join();
  (*server)->Shutdown(absl::Seconds(1));
  return times;
}

int Main() {
  const std::vector<double> coordinator = FetchTimes(v1::EXCHANGE_STAR);
  if (coordinator.empty()) return 1;
  const std::vector<double> holders = FetchTimes(v1::EXCHANGE_SHARDED);
  if (holders.empty()) return 1;
  const int64_t n = absl::GetFlag(FLAGS_values);
  std::printf("values %ld MB %.0f fetch_median_s coordinator %.3f holders %.3f ratio %.2f\n",
              static_cast<long>(n), static_cast<double>(n) * 4 / 1e6, Median(coordinator),
              Median(holders), Median(holders) / Median(coordinator));
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace localsgd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return localsgd::Main();
}
