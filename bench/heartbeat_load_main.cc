// Control-plane load for bench/heartbeat_load_bench.py: --workers simulated workers in one
// process (one stub each, over --channels channels) join the coordinator, then each sends one
// heartbeat per --interval for --seconds, spread evenly over the interval. Prints one line:
// "heartbeats N errors E not_found F p50_ms X p99_ms Y max_ms Z" (not_found: a lease that
// expired although its worker kept beating).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/grpc_channel.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051", "Coordinator gRPC HOST:PORT.");
ABSL_FLAG(std::string, token, "", "Bearer token.");
ABSL_FLAG(int, workers, 1000, "Simulated workers.");
ABSL_FLAG(int, threads, 32, "Client threads sending the heartbeats.");
ABSL_FLAG(int, channels, 8, "gRPC channels the stubs share.");
ABSL_FLAG(absl::Duration, interval, absl::Seconds(1), "Heartbeat interval per worker.");
ABSL_FLAG(absl::Duration, seconds, absl::Seconds(60), "How long to keep heartbeating.");

namespace {

using localsgd::v1::Coordinator;

std::unique_ptr<grpc::ClientContext> Context(const std::string& token) {
  return localsgd::AuthorizedContext(token, absl::Seconds(10));
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string token = absl::GetFlag(FLAGS_token);
  const int workers = absl::GetFlag(FLAGS_workers);
  const int threads = absl::GetFlag(FLAGS_threads);
  std::vector<std::unique_ptr<Coordinator::Stub>> stubs;
  for (int c = 0; c < absl::GetFlag(FLAGS_channels); ++c) {
    // Distinct channel arguments keep gRPC from sharing one connection between channels.
    grpc::ChannelArguments args = localsgd::StreamingChannelArguments();
    args.SetInt("localsgd.bench_channel", c);
    stubs.push_back(Coordinator::NewStub(grpc::CreateCustomChannel(
        absl::GetFlag(FLAGS_coordinator), grpc::InsecureChannelCredentials(), args)));
  }
  std::vector<std::string> ids(workers);
  std::vector<std::string> credentials(workers);
  const absl::Time joins_start = absl::Now();
  for (int w = 0; w < workers; ++w) {
    localsgd::v1::JoinRequest join;
    join.mutable_identity()->set_node_name(absl::StrCat("sim-", w));
    join.mutable_identity()->set_local_world_size(1);
    join.set_hostname("heartbeat-load");
    localsgd::v1::JoinResponse response;
    grpc::Status status = stubs[w % stubs.size()]->Join(Context(token).get(), join, &response);
    if (!status.ok()) {
      std::fprintf(stderr, "join sim-%d: %s\n", w, status.error_message().c_str());
      return 1;
    }
    ids[w] = response.worker_id();
    credentials[w] = response.member_credential();
  }
  std::printf("joins %d seconds %.3f\n", workers, absl::ToDoubleSeconds(absl::Now() - joins_start));
  std::fflush(stdout);

  const absl::Duration interval = absl::GetFlag(FLAGS_interval);
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::GetFlag(FLAGS_seconds);
  std::atomic<int64_t> errors{0}, not_found{0};
  std::mutex mu;
  std::vector<double> latencies_ms;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<double> mine;
      // Worker w beats at start + k * interval + (w / workers) * interval.
      for (int64_t k = 0;; ++k) {
        for (int w = t; w < workers; w += threads) {
          const absl::Time due =
              start + k * interval + interval * (static_cast<double>(w) / workers);
          if (due >= end) goto done;
          absl::SleepFor(due - absl::Now());
          localsgd::v1::HeartbeatRequest request;
          request.set_worker_id(ids[w]);
          request.set_member_credential(credentials[w]);
          request.set_step(k);
          request.set_loss(1.0);
          localsgd::v1::HeartbeatResponse response;
          const absl::Time sent = absl::Now();
          grpc::Status status =
              stubs[w % stubs.size()]->Heartbeat(Context(token).get(), request, &response);
          mine.push_back(absl::ToDoubleMilliseconds(absl::Now() - sent));
          if (status.error_code() == grpc::StatusCode::NOT_FOUND) ++not_found;
          if (!status.ok()) ++errors;
        }
      }
    done:
      std::lock_guard<std::mutex> lock(mu);
      latencies_ms.insert(latencies_ms.end(), mine.begin(), mine.end());
    });
  }
  for (auto& thread : pool) thread.join();
  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto quantile = [&](double q) {
    return latencies_ms.empty() ? 0.0
                                : latencies_ms[static_cast<size_t>(q * (latencies_ms.size() - 1))];
  };
  std::printf("heartbeats %zu errors %lld not_found %lld p50_ms %.3f p99_ms %.3f max_ms %.3f\n",
              latencies_ms.size(), static_cast<long long>(errors.load()),
              static_cast<long long>(not_found.load()), quantile(0.5), quantile(0.99),
              quantile(1.0));
  return 0;
}
