// The control plane while the state disk is slow: a coordinator (in this process, on
// loopback ports) whose every write to its state folder takes --write_delay, two members
// syncing star rounds of --values floats as fast as they can (each commit writes model.bin
// and state.textproto), and probes that time Heartbeat, Join (+ Leave) and GET /status one
// after another for --seconds. Prints one line per probe ("heartbeat n N p50_ms X p99_ms Y
// max_ms Z") and one for the rounds ("rounds committed N writes W write_delay_ms D").
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_channel.h"
#include "common/mutex.h"
#include "coordinator/coordinator_server.h"
#include "exchange/model_client.h"
#include "exchange/star_exchange.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"

ABSL_FLAG(absl::Duration, write_delay, absl::Milliseconds(200),
          "How long every write to the state folder takes.");
ABSL_FLAG(absl::Duration, seconds, absl::Seconds(20), "How long to probe.");
ABSL_FLAG(int64_t, values, 1 << 20, "Floats in the model.");
ABSL_FLAG(std::string, state_dir, "/tmp/localsgd-slow-disk-bench", "The state folder.");

namespace localsgd {
namespace {

class Latencies {
 public:
  void Add(absl::Duration d) {
    MutexLock lock(&mu_);
    ms_.push_back(absl::ToDoubleMilliseconds(d));
  }
  void Print(const char* name) {
    MutexLock lock(&mu_);
    std::sort(ms_.begin(), ms_.end());
    auto at = [&](double q) {
      return ms_.empty() ? 0.0 : ms_[std::min(ms_.size() - 1, static_cast<size_t>(q * ms_.size()))];
    };
    std::printf("%s n %zu p50_ms %.2f p99_ms %.2f max_ms %.2f\n", name, ms_.size(), at(0.5),
                at(0.99), ms_.empty() ? 0.0 : ms_.back());
  }

 private:
  Mutex mu_;
  std::vector<double> ms_ ABSL_GUARDED_BY(mu_);
};

v1::JoinRequest JoinAs(const std::string& node, int rank, int ranks) {
  v1::JoinRequest join;
  join.mutable_identity()->set_node_name(node);
  join.mutable_identity()->set_local_rank(rank);
  join.mutable_identity()->set_local_world_size(ranks);
  return join;
}

int Main() {
  const absl::Duration delay = absl::GetFlag(FLAGS_write_delay);
  std::atomic<int64_t> writes{0};
  std::filesystem::remove_all(absl::GetFlag(FLAGS_state_dir));
  CoordinatorServer::Options options;
  options.grpc_address = "127.0.0.1:0";
  options.http_address = "127.0.0.1:0";
  options.state_dir = absl::GetFlag(FLAGS_state_dir);
  options.before_state_write = [&](const std::string&) {
    ++writes;
    absl::SleepFor(delay);
  };
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", server.status().ToString().c_str());
    return 1;
  }
  auto channel = grpc::CreateCustomChannel(
      (*server)->grpc_address(), grpc::InsecureChannelCredentials(), StreamingChannelArguments());
  auto stub = v1::Coordinator::NewStub(channel);
  auto call = [](auto method) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    return method(&context);
  };
  // Two node leaders, and a run of star rounds between them.
  std::vector<std::string> members;
  std::vector<std::string> credentials;
  for (const char* node : {"n0", "n1"}) {
    v1::JoinResponse joined;
    grpc::Status s =
        call([&](grpc::ClientContext* c) { return stub->Join(c, JoinAs(node, 0, 1), &joined); });
    if (!s.ok()) {
      std::fprintf(stderr, "join: %s\n", s.error_message().c_str());
      return 1;
    }
    members.push_back(joined.worker_id());
    credentials.push_back(joined.member_credential());
  }
  v1::StartRunRequest start;
  start.mutable_spec()->mutable_model()->set_custom("bench");
  start.mutable_spec()->set_exchange(v1::EXCHANGE_STAR);
  start.mutable_spec()->set_min_workers(2);
  start.mutable_spec()->set_total_steps(1'000'000'000);
  v1::StartRunResponse started;
  if (grpc::Status s =
          call([&](grpc::ClientContext* c) { return stub->StartRun(c, start, &started); });
      !s.ok()) {
    std::fprintf(stderr, "start: %s\n", s.error_message().c_str());
    return 1;
  }
  const v1::RunInfo& run = started.run();
  const int64_t n = absl::GetFlag(FLAGS_values);
  ModelClient models(channel, "");
  std::vector<float> initial(static_cast<size_t>(n), 0.0f);
  const ChunkLayout layout = ChunkLayout::ForBytes(n, run.spec().chunk_bytes());
  if (absl::Status s = models
                           .InitModel(run.run_id(), members[0], credentials[0], initial, layout,
                                      absl::Seconds(30))
                           .status();
      !s.ok()) {
    std::fprintf(stderr, "init: %s\n", s.ToString().c_str());
    return 1;
  }
  std::atomic<bool> done{false};
  std::atomic<int64_t> committed{0};
  std::vector<std::thread> threads;
  for (size_t m = 0; m < members.size(); ++m) {
    threads.emplace_back([&, m] {
      std::vector<float> global = initial;
      std::vector<float> params(global.size());
      StarExchange exchange(channel, "");
      SyncMember member{
          run.run_id(), members[m], v1::CODEC_FP32, 1, 1, [&, m] { return credentials[m]; }};
      for (int64_t round = 1; !done; ++round) {
        for (size_t i = 0; i < params.size(); ++i) params[i] = global[i] + 1e-3f * (m + 1);
        absl::StatusOr<ExchangeResult> synced = exchange.Run(
            member, {round, 8 * round, params, absl::MakeSpan(global), {}, absl::Seconds(60)});
        if (synced.ok() && m == 0) ++committed;
        if (!synced.ok() && !done) {
          std::fprintf(stderr, "sync %ld: %s\n", static_cast<long>(round),
                       synced.status().ToString().c_str());
          std::optional<v1::StaleRound> stale = StaleRoundOf(synced.status());
          if (!stale.has_value()) return;
          round = stale->committed_round();  // catch up: next round
          absl::StatusOr<ModelClient::Model> model = models.FetchModel("", absl::Seconds(60));
          if (model.ok()) global = model->values;
        }
      }
    });
  }
  // The probes, one after another, while the rounds run.
  Latencies heartbeat, join, status;
  httplib::Client http("http://" + (*server)->http_address());
  const absl::Time end = absl::Now() + absl::GetFlag(FLAGS_seconds);
  for (int i = 0; absl::Now() < end; ++i) {
    for (size_t m = 0; m < members.size(); ++m) {
      v1::HeartbeatRequest beat;
      beat.set_worker_id(members[m]);
      beat.set_member_credential(credentials[m]);
      v1::HeartbeatResponse answer;
      const absl::Time t = absl::Now();
      grpc::Status s =
          call([&](grpc::ClientContext* c) { return stub->Heartbeat(c, beat, &answer); });
      if (s.ok()) heartbeat.Add(absl::Now() - t);
    }
    {
      // A rank of a probe node (not a leader: not in the rounds), joined and gone.
      v1::JoinResponse joined;
      const absl::Time t = absl::Now();
      grpc::Status s = call([&](grpc::ClientContext* c) {
        return stub->Join(c, JoinAs(absl::StrCat("probe", i), 1, 2), &joined);
      });
      if (s.ok()) {
        join.Add(absl::Now() - t);
        v1::LeaveRequest leave;
        leave.set_worker_id(joined.worker_id());
        leave.set_member_credential(joined.member_credential());
        v1::LeaveResponse left;
        call([&](grpc::ClientContext* c) { return stub->Leave(c, leave, &left); });
      }
    }
    {
      const absl::Time t = absl::Now();
      httplib::Result got = http.Get("/status");
      if (got && got->status == 200) status.Add(absl::Now() - t);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  heartbeat.Print("heartbeat");
  join.Print("join");
  status.Print("status");
  std::printf("rounds committed %ld writes %ld write_delay_ms %.0f\n",
              static_cast<long>(committed.load()), static_cast<long>(writes.load()),
              absl::ToDoubleMilliseconds(delay));
  std::fflush(stdout);
  done = true;
  v1::StopRunRequest stop;
  v1::StopRunResponse stopped;
  call([&](grpc::ClientContext* c) { return stub->StopRun(c, stop, &stopped); });
  for (std::thread& t : threads) t.join();
  (*server)->Shutdown(absl::Seconds(1));
  return 0;
}

}  // namespace
}  // namespace localsgd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return localsgd::Main();
}
