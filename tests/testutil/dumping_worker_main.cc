// The worker with a testing aid for tests that check averages bit for bit: with --dump_dir it
// writes the flat tensors before and after each sync, as <dir>/<node>-<rank>-<step>-pre.bin
// and -post.bin (a later sync at the same step overwrites them), and the same files of each
// pass as <dir>/pass-<k>/..., where a new pass begins when the rank's step goes back (it
// adopted an older committed model), so no pass is lost. A sync that failed leaves
// <dir>/<node>-<rank>-<step>.failed holding its error (removed when a later sync at that step
// succeeds). An overlapped round's merge writes <dir>/<node>-<rank>-<step>-merged.bin (the
// values after it; the ranks of a node differ there by design) in the same passes. Otherwise
// it is the shipped worker.
#include <sys/stat.h>
#include <torch/types.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "worker/parameter_averager.h"
#include "worker/worker_app.h"

ABSL_FLAG(std::string, dump_dir, "",
          "Testing aid: write each sync's flat parameters before and after averaging here.");

namespace {

class DumpingAverager : public localsgd::ParameterAverager {
 public:
  DumpingAverager(localsgd::ParameterAverager* inner, std::string dir, std::string name)
      : inner_(inner), dir_(std::move(dir)), name_(std::move(name)) {
    mkdir(absl::StrCat(dir_, "/pass-0").c_str(), 0755);
  }
  absl::Status Average(const std::vector<at::Tensor>& tensors, int fragment,
                       int64_t* step) override {
    const int64_t at = *step;
    NewPassIfBack(at);
    const std::string file = absl::StrCat(name_, "-", at);
    Dump(tensors, file + "-pre.bin");
    absl::Status status = inner_->Average(tensors, fragment, step);
    Dump(tensors, file + "-post.bin");
    const std::string failed = absl::StrCat(dir_, "/", file, ".failed");
    if (status.ok()) {
      std::remove(failed.c_str());
    } else {
      std::ofstream(failed) << status.ToString() << "\n";
    }
    return status;
  }
  absl::Status Launch(const std::vector<at::Tensor>& tensors, int fragment,
                      int64_t* step) override {
    return inner_->Launch(tensors, fragment, step);
  }
  absl::Status Merge(const std::vector<at::Tensor>& tensors, int64_t* step) override {
    const int64_t at = *step;
    NewPassIfBack(at);
    absl::Status status = inner_->Merge(tensors, step);
    Dump(tensors, absl::StrCat(name_, "-", at, "-merged.bin"));
    return status;
  }
  absl::Status Health() const override { return inner_->Health(); }
  void SetTrainedSteps(int64_t steps) override { inner_->SetTrainedSteps(steps); }

 private:
  void NewPassIfBack(int64_t at) {
    if (at <= last_step_) {
      ++pass_;
      mkdir(absl::StrCat(dir_, "/pass-", pass_).c_str(), 0755);
    }
    last_step_ = at;
  }
  void Dump(const std::vector<at::Tensor>& tensors, const std::string& file) const {
    std::ofstream out(absl::StrCat(dir_, "/", file), std::ios::binary);
    std::ofstream pass(absl::StrCat(dir_, "/pass-", pass_, "/", file), std::ios::binary);
    for (const at::Tensor& t : tensors) {
      at::Tensor c = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
      const auto* bytes = reinterpret_cast<const char*>(c.data_ptr<float>());
      out.write(bytes, c.numel() * sizeof(float));
      pass.write(bytes, c.numel() * sizeof(float));
    }
  }
  localsgd::ParameterAverager* inner_;
  const std::string dir_;
  const std::string name_;
  int64_t last_step_ = -1;
  int pass_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  // Flags are parsed inside RunWorker; the wrapper reads --dump_dir when the averager exists.
  return localsgd::RunWorker(
      argc, argv,
      [](localsgd::ParameterAverager* inner,
         const std::string& name) -> std::unique_ptr<localsgd::ParameterAverager> {
        const std::string dir = absl::GetFlag(FLAGS_dump_dir);
        if (dir.empty()) return nullptr;
        return std::make_unique<DumpingAverager>(inner, dir, name);
      });
}
