// localsgd._C: the Python package's native part (python/localsgd/__init__.py is the API):
// Replica (worker/replica.h) over the same LibTorch as Python's torch, so parameters are
// averaged in place with no copy; ControlClient (common/control_client.h) and the model
// download. Errors raise localsgd.Error (RunEnded for OUT_OF_RANGE, InvalidArgument for
// INVALID_ARGUMENT) with the C++ side's message; blocking calls release the GIL, and Ctrl-C
// while joining or waiting for a run raises KeyboardInterrupt.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/create_channel.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/control_client.h"
#include "common/grpc_channel.h"
#include "common/run_spec.h"
#include "common/tls.h"
#include "exchange/model_client.h"
#include "exchange/model_fetcher.h"
#include "python/proto_to_python.h"
#include "worker/environment.h"
#include "worker/replica.h"

namespace py = pybind11;

namespace localsgd {
namespace {

PyObject* g_error = nullptr;
PyObject* g_run_ended = nullptr;
PyObject* g_invalid_argument = nullptr;

// A non-OK status on its way to Python.
struct StatusError {
  absl::Status status;
};

void Check(const absl::Status& status) {
  if (!status.ok()) throw StatusError{status};
}
template <typename T>
T Check(absl::StatusOr<T> result) {
  Check(result.status());
  return *std::move(result);
}

// Runs f() with the GIL released; returns what it returns.
template <typename F>
auto WithoutGil(F f) {
  py::gil_scoped_release release;
  return f();
}

// Where to connect: the environment (worker/environment.h), each keyword argument the caller
// gave standing for its variable.
SessionOptions MakeSessionOptions(const py::dict& given) {
  static const auto* const kVariables =
      new std::map<std::string, std::string>{{"coordinator", "LOCALSGD_COORDINATOR"},
                                             {"token_file", "LOCALSGD_TOKEN_FILE"},
                                             {"tls_ca", "LOCALSGD_TLS_CA"},
                                             {"tls_cert", "LOCALSGD_TLS_CERT"},
                                             {"tls_key", "LOCALSGD_TLS_KEY"},
                                             {"node_name", "LOCALSGD_NODE_NAME"},
                                             {"node_key_file", "LOCALSGD_NODE_KEY_FILE"},
                                             {"rendezvous_dir", "LOCALSGD_RENDEZVOUS_DIR"},
                                             {"checkpoint_dir", "LOCALSGD_CHECKPOINT_DIR"},
                                             {"connect_timeout", "LOCALSGD_CONNECT_TIMEOUT"},
                                             {"round_steps", "LOCALSGD_ROUND_STEPS"}};
  std::map<std::string, std::string> overrides;
  for (const auto& [argument, variable] : *kVariables) {
    if (given.contains(argument) && !given[argument.c_str()].is_none()) {
      overrides[variable] = given[argument.c_str()].cast<std::string>();
    }
  }
  return Check(SessionOptionsFromEnvironment(
      SessionOptions(), [&overrides](const std::string& name) -> std::optional<std::string> {
        auto it = overrides.find(name);
        return it != overrides.end() ? std::optional<std::string>(it->second)
                                     : ProcessEnvironment(name);
      }));
}

v1::RunSpec SpecFromJson(const std::string& json, const char* what) {
  v1::RunSpec spec;
  if (json.empty()) return spec;
  auto status = google::protobuf::util::JsonStringToMessage(json, &spec);
  if (!status.ok()) {
    Check(absl::InvalidArgumentError(absl::StrCat(what, ": ", status.message().as_string())));
  }
  return spec;
}

// Deletes a Replica (its last sync, and waiting for the run to end) with the GIL released.
struct ReleaseGilDelete {
  void operator()(Replica* replica) const {
    py::gil_scoped_release release;
    delete replica;
  }
};
using ReplicaPtr = std::unique_ptr<Replica, ReleaseGilDelete>;

ReplicaPtr Connect(std::vector<at::Tensor> tensors, std::vector<at::Tensor> buffers,
                   const py::dict& connection, const std::string& start_json,
                   const std::string& expect_json) {
  Replica::Options options;
  options.buffers = std::move(buffers);
  options.session = MakeSessionOptions(connection);
  if (!start_json.empty()) options.start = SpecFromJson(start_json, "start");
  options.expect = SpecFromJson(expect_json, "expected spec");
  if (!tensors.empty()) options.session->device = tensors.front().device();
  // Ctrl-C while joining or waiting: Python's handler runs in the main thread, on demand.
  auto interrupted = std::make_shared<std::atomic<bool>>(false);
  options.session->stop = [interrupted] {
    if (interrupted->load()) return true;
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) interrupted->store(true);
    return interrupted->load();
  };
  absl::StatusOr<std::unique_ptr<Replica>> replica =
      WithoutGil([&] { return Replica::Connect(std::move(tensors), std::move(options)); });
  if (interrupted->load() && PyErr_Occurred()) throw py::error_already_set();
  return ReplicaPtr(Check(std::move(replica)).release());
}

// The coordinator's operator API and its models.
class Client {
 public:
  // `connection`: as for Replica (coordinator, token_file, tls_*), over the environment.
  Client(const py::dict& connection, double timeout) : timeout_(absl::Seconds(timeout)) {
    const SessionOptions options = MakeSessionOptions(connection);
    auto credentials = Check(MakeChannelCredentials(options.tls));
    control_ = std::make_unique<ControlClient>(
        grpc::CreateChannel(options.coordinator, credentials), options.token, timeout_);
    models_ = std::make_unique<ModelClient>(
        CreateStreamingChannel(options.coordinator, credentials), options.token);
    // From the node leaders that hold it when they are live (checked by digest), else from
    // the coordinator.
    fetcher_ = std::make_unique<ModelFetcher>(
        ModelFetcher::Options{models_.get(), options.token, credentials, /*member_id=*/""});
  }

  py::object Start(const std::string& spec_json) {
    v1::RunSpec spec = SpecFromJson(spec_json, "spec");
    return ProtoToPython(Check(WithoutGil([&] { return control_->Start(spec); })));
  }
  py::object Stop(const std::string& run_id, const std::string& reason) {
    return ProtoToPython(Check(WithoutGil([&] { return control_->Stop(run_id, reason); })));
  }
  py::object Status() {
    return ProtoToPython(Check(WithoutGil([&] { return control_->Status(); })));
  }
  py::object Runs() {
    return ProtoToPython(Check(WithoutGil([&] { return control_->Runs(); })))["runs"];
  }
  // Calls on_status(dict) until it returns False.
  // Calls on_status(dict) until it returns False or cancel_watch(watch_id).
  void Watch(double interval, const std::function<bool(py::object)>& on_status, int64_t watch_id) {
    Check(WithoutGil([&] {
      return control_->Watch(
          absl::Seconds(interval),
          [&](const v1::CoordinatorStatus& s) {
            py::gil_scoped_acquire gil;
            return on_status(ProtoToPython(s));
          },
          watch_id);
    }));
  }
  void CancelWatch(int64_t watch_id) { control_->CancelWatch(watch_id); }
  py::dict FetchModel(const std::string& run_id) {
    ModelFetcher::Fetched fetched = Check(
        WithoutGil([&] { return fetcher_->Fetch(run_id, timeout_, /*include_momentum=*/false); }));
    ModelClient::Model& m = fetched.model;
    at::Tensor values = torch::empty({static_cast<int64_t>(m.values.size())}, torch::kFloat32);
    std::memcpy(values.data_ptr<float>(), m.values.data(), m.values.size() * sizeof(float));
    py::dict out;
    out["run_id"] = m.run_id;
    out["round"] = m.round;
    out["global_step"] = m.global_step;
    out["values"] = values;
    out["source"] = fetched.source;
    return out;
  }

 private:
  const absl::Duration timeout_;
  std::unique_ptr<ControlClient> control_;
  std::unique_ptr<ModelClient> models_;
  std::unique_ptr<ModelFetcher> fetcher_;
};

}  // namespace
}  // namespace localsgd

PYBIND11_MODULE(_C, m) {
  using localsgd::Replica;
  namespace v1 = localsgd::v1;
  m.doc() = "localsgd's native part; use the localsgd package.";
  localsgd::g_error = PyErr_NewException("localsgd.Error", PyExc_RuntimeError, nullptr);
  localsgd::g_run_ended = PyErr_NewException("localsgd.RunEnded", localsgd::g_error, nullptr);
  py::tuple invalid_bases =
      py::make_tuple(py::handle(localsgd::g_error), py::handle(PyExc_ValueError));
  localsgd::g_invalid_argument =
      PyErr_NewException("localsgd.InvalidArgument", invalid_bases.ptr(), nullptr);
  m.attr("Error") = py::handle(localsgd::g_error);
  m.attr("RunEnded") = py::handle(localsgd::g_run_ended);
  m.attr("InvalidArgument") = py::handle(localsgd::g_invalid_argument);
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const localsgd::StatusError& e) {
      PyObject* type = absl::IsOutOfRange(e.status)        ? localsgd::g_run_ended
                       : absl::IsInvalidArgument(e.status) ? localsgd::g_invalid_argument
                                                           : localsgd::g_error;
      PyErr_SetString(type, e.status.ToString().c_str());
    }
  });

  m.def(
      "placement",
      [] {
        localsgd::SessionOptions o = localsgd::Check(localsgd::SessionOptionsFromEnvironment());
        py::dict out;
        out["rank"] = o.rank;
        out["world_size"] = o.world_size;
        out["local_rank"] = o.local_rank;
        out["local_world_size"] = o.local_world_size;
        return out;
      },
      "This process's ranks from the environment (torchrun's or srun's variables).");

  m.def(
      "spec_text_to_json",
      [](const std::string& text) {
        v1::RunSpec spec = localsgd::Check(localsgd::ParseRunSpecText(text));
        std::string json;
        google::protobuf::util::JsonPrintOptions options;
        options.preserve_proto_field_names = true;
        (void)google::protobuf::util::MessageToJsonString(spec, &json, options);
        return json;
      },
      "A text-format RunSpec as JSON.");

  py::class_<Replica, localsgd::ReplicaPtr>(m, "Replica")
      .def_static("connect", &localsgd::Connect, py::arg("tensors"), py::arg("buffers"),
                  py::arg("connection"), py::arg("start_json"), py::arg("expect_json"))
      .def(
          "step", [](Replica& r) { localsgd::Check(r.Step()); },
          py::call_guard<py::gil_scoped_release>())
      .def(
          "report",
          [](Replica& r, double loss, double accuracy, int64_t samples) {
            localsgd::Check(r.Report(loss, accuracy, samples));
          },
          py::arg("loss"), py::arg("accuracy") = -1.0, py::arg("samples") = 0)
      .def(
          "finish",
          [](Replica& r, double wait) {
            absl::Status status =
                localsgd::WithoutGil([&] { return r.Finish(absl::Seconds(wait)); });
            // Ctrl-C while it waited for the run to end: it left; KeyboardInterrupt goes on.
            if (PyErr_Occurred()) throw py::error_already_set();
            localsgd::Check(status);
          },
          py::arg("wait") = 60.0)
      .def(
          "leave",
          // `failed`: the loop raised an error (LeaveRequest.failed).
          [](Replica& r, const std::string& reason, bool failed) {
            localsgd::Check(
                r.Leave(reason, failed ? Replica::Departure::kFailed : Replica::Departure::kDone));
          },
          py::arg("reason"), py::arg("failed") = false, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("rank", &Replica::rank)
      .def_property_readonly("world_size", &Replica::world_size)
      .def_property_readonly("local_rank", &Replica::local_rank)
      .def_property_readonly("local_world_size", &Replica::local_world_size)
      .def_property_readonly("run_id", &Replica::run_id)
      .def_property_readonly("worker_id", &Replica::worker_id)
      .def_property_readonly("steps", &Replica::steps)
      .def_property_readonly("syncs", &Replica::syncs)
      .def_property_readonly("run_ended", &Replica::run_ended)
      .def_property_readonly("spec",
                             [](const Replica& r) { return localsgd::ProtoToPython(r.spec()); });

  py::class_<localsgd::Client>(m, "Client")
      .def(py::init<const py::dict&, double>(), py::arg("connection"), py::arg("timeout"))
      .def("start", &localsgd::Client::Start)
      .def("stop", &localsgd::Client::Stop)
      .def("status", &localsgd::Client::Status)
      .def("runs", &localsgd::Client::Runs)
      .def("watch", &localsgd::Client::Watch)
      .def("cancel_watch", &localsgd::Client::CancelWatch)
      .def("fetch_model", &localsgd::Client::FetchModel);
}
