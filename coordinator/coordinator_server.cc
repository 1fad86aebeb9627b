#include "coordinator/coordinator_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/address.h"
#include "common/grpc_channel.h"
#include "common/listen_socket.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "coordinator/status_page.h"
#include "coordinator/status_render.h"

namespace localsgd {
namespace {

constexpr char kServiceName[] = "localsgd.v1.Coordinator";
constexpr char kAveragingServiceName[] = "localsgd.v1.Averaging";

std::chrono::system_clock::time_point Deadline(absl::Duration from_now) {
  return absl::ToChronoTime(absl::Now() + from_now);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(Options options) {
  // Every flag is checked before anything binds a port, so that a mistake in them is what a
  // user is told even where the port is taken.
  LOCALSGD_ASSIGN_OR_RETURN(HostPort grpc_address,
                            ParseHostPort(options.grpc_address, "--grpc_address"));
  if (options.lease_timeout <= absl::ZeroDuration() ||
      options.heartbeat_interval <= absl::ZeroDuration() ||
      options.heartbeat_interval >= options.lease_timeout) {
    return absl::InvalidArgumentError(
        "--lease_timeout and --heartbeat_interval: need 0 < heartbeat interval < lease timeout");
  }
  if (!(options.model_save_share > 0 && options.model_save_share <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model_save_share: ", options.model_save_share, " is not in (0, 1]"));
  }
  LOCALSGD_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                            MakeServerCredentials(options.tls));
  if (grpc_address.port != 0) {
    // Tried before gRPC's own bind, so that a taken port is said in one line (gRPC's refusal is
    // a dump of its internals that never says why).
    LOCALSGD_ASSIGN_OR_RETURN(const ListenSocket probe, Listen(grpc_address, "--grpc_address"));
    close(probe.fd);
  }

  std::unique_ptr<CoordinatorServer> self(new CoordinatorServer());
  if (!options.state_dir.empty()) {
    StateWriter::Options state;
    state.state_dir = options.state_dir;
    state.before_write = options.before_state_write;
    state.model_save_share = options.model_save_share;
    LOCALSGD_ASSIGN_OR_RETURN(self->state_, StateWriter::Open(std::move(state)));
  }
  ControlPlane::Options plane_options;
  plane_options.lease_timeout = options.lease_timeout;
  plane_options.heartbeat_interval = options.heartbeat_interval;
  plane_options.state = self->state_.get();
  plane_options.clock = options.clock;
  plane_options.transport_security = options.tls.Name();
  plane_options.token_required = !options.token.empty();
  plane_options.node_key_secret = options.node_key_secret;
  LOCALSGD_ASSIGN_OR_RETURN(std::unique_ptr<ControlPlane> plane,
                            ControlPlane::Create(plane_options));
  self->plane_ = std::move(plane);
  self->watchers_ = std::make_unique<StatusWatchHub>(self->plane_.get(), options.clock);
  RoundManager::Options round_options;
  round_options.clock = options.clock;
  round_options.state = self->state_.get();
  self->rounds_ = std::make_unique<RoundManager>(self->plane_.get(), round_options);
  LOCALSGD_RETURN_IF_ERROR(self->rounds_->Restore());
  self->service_ = std::make_unique<CoordinatorService>(self->plane_.get(), self->rounds_.get(),
                                                        self->watchers_.get(), options.token);
  self->averaging_ = std::make_unique<AveragingService>(self->rounds_.get(), options.token);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Without this gRPC sets SO_REUSEPORT, and a second coordinator could share a taken port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  int port = 0;
  builder.AddListeningPort(options.grpc_address, credentials, &port);
  builder.RegisterService(self->service_.get());
  builder.RegisterService(self->averaging_.get());
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  UseStreamingArguments(&builder);
  self->grpc_server_ = builder.BuildAndStart();
  if (self->grpc_server_ == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("--grpc_address: cannot listen on ", options.grpc_address));
  }
  self->grpc_address_ = HostPort{grpc_address.host, port}.ToString();
  grpc::HealthCheckServiceInterface* health = self->grpc_server_->GetHealthCheckService();
  health->SetServingStatus(true);
  health->SetServingStatus(kServiceName, true);
  health->SetServingStatus(kAveragingServiceName, true);

  if (!options.http_address.empty()) {
    ControlPlane* plane_ptr = self->plane_.get();
    HttpServer::Options http;
    http.address = options.http_address;
    // The page, rendered here; its script fetches /ui/body to update itself.
    auto page_data = [plane_ptr] {
      PageData data;
      data.status = plane_ptr->Status();
      data.runs = plane_ptr->ListRuns();
      absl::StatusOr<v1::RunSeries> series = plane_ptr->Series(data.status.run().run_id());
      if (series.ok()) data.series = *std::move(series);
      return data;
    };
    http.routes["/"] = [page_data] {
      return HttpServer::Response{200, "text/html; charset=utf-8", StatusPage(page_data())};
    };
    http.routes["/ui/body"] = [page_data] {
      return HttpServer::Response{200, "text/html; charset=utf-8", StatusPageBody(page_data())};
    };
    http.routes["/runs"] = [plane_ptr] {
      v1::ListRunsResponse runs;
      for (v1::RunInfo& run : plane_ptr->ListRuns()) *runs.add_runs() = std::move(run);
      return HttpServer::Response{200, "application/json", ProtoToJson(runs)};
    };
    // /runs/ID: the run's record; /runs/ID/series: its rounds for charts.
    http.prefix_routes["/runs/"] = [plane_ptr](absl::string_view rest) {
      auto error = [](int code, const absl::Status& status) {
        return HttpServer::Response{
            code, "application/json",
            absl::StrCat("{\"error\": ", JsonString(status.message()), "}\n")};
      };
      if (absl::ConsumeSuffix(&rest, "/series")) {
        absl::StatusOr<v1::RunSeries> series = plane_ptr->Series(std::string(rest));
        if (!series.ok()) return error(404, series.status());
        return HttpServer::Response{200, "application/json", ProtoToJson(*series)};
      }
      for (const v1::RunInfo& run : plane_ptr->ListRuns()) {
        if (run.run_id() == rest) {
          return HttpServer::Response{200, "application/json", ProtoToJson(run)};
        }
      }
      return error(404, absl::NotFoundError(absl::StrCat("run ", Quoted(rest), " is not known")));
    };
    http.routes["/status"] = [plane_ptr] {
      return HttpServer::Response{200, "application/json", StatusToJson(plane_ptr->Status())};
    };
    http.routes["/metrics"] = [plane_ptr] {
      const absl::StatusOr<ProcessStats> process = ReadProcessStats();
      return HttpServer::Response{
          200, "text/plain; version=0.0.4; charset=utf-8",
          StatusToPrometheus(plane_ptr->Status(), process.ok() ? &*process : nullptr)};
    };
    http.routes["/healthz"] = [plane_ptr] {
      if (plane_ptr->draining()) return HttpServer::Response{503, "text/plain", "draining\n"};
      return HttpServer::Response{200, "text/plain", "ok\n"};
    };
    absl::StatusOr<std::unique_ptr<HttpServer>> http_server = HttpServer::Start(std::move(http));
    if (!http_server.ok()) {
      self->grpc_server_->Shutdown(Deadline(absl::ZeroDuration()));
      return http_server.status();
    }
    self->http_server_ = *std::move(http_server);
    self->http_address_ = self->http_server_->address();
  }

  // Leases and quorum timeouts are checked this often; round deadlines and grace windows
  // (RunSpec.round_grace_seconds) more often, so that a round waits past them by little.
  const absl::Duration tick = std::min(options.lease_timeout / 4, absl::Milliseconds(250));
  const absl::Duration round_tick = std::min(tick, absl::Milliseconds(50));
  CoordinatorServer* raw = self.get();
  self->plane_ticker_ =
      std::thread([raw, tick] { raw->TickLoop(tick, [raw] { raw->plane_->Tick(); }); });
  self->round_ticker_ = std::thread(
      [raw, round_tick] { raw->TickLoop(round_tick, [raw] { raw->rounds_->Tick(); }); });
  return self;
}

void CoordinatorServer::TickLoop(absl::Duration interval, const std::function<void()>& tick) {
  while (!stop_ticking_.WaitForNotificationWithTimeout(interval)) tick();
}

void CoordinatorServer::Shutdown(absl::Duration grace) {
  {
    MutexLock lock(&shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  plane_->Drain();
  grpc_server_->GetHealthCheckService()->Shutdown();
  watchers_->EndAll(ToGrpcStatus(absl::UnavailableError("coordinator is shutting down")));
  grpc_server_->Shutdown(Deadline(grace));
  grpc_server_->Wait();
  if (http_server_ != nullptr) http_server_->Stop();
  stop_ticking_.Notify();
  plane_ticker_.join();
  round_ticker_.join();
}

CoordinatorServer::~CoordinatorServer() {
  if (grpc_server_ != nullptr && plane_ticker_.joinable()) Shutdown(absl::Seconds(1));
}

}  // namespace localsgd
