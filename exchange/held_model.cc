#include "exchange/held_model.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace localsgd {

void HeldModel::DetachReaders() {
  for (auto& [id, reader] : readers_) {
    if (reader.detached) continue;
    for (int b = 0; b < (reader.momentum ? 2 : 1); ++b) {
      if (reader.next[b] >= reader.end_chunk) continue;  // read to its end
      const std::vector<float>& from = b == 0 ? values_ : momentum_;
      const int64_t begin = reader.layout.begin(reader.next[b]);
      reader.aside[b].assign(from.begin() + begin,
                             from.begin() + reader.layout.end(reader.end_chunk - 1));
      reader.aside_from[b] = begin;
    }
    reader.detached = true;
  }
}

void HeldModel::Install(std::string run_id, int64_t round, int64_t global_step,
                        std::vector<float> values, std::vector<float> momentum) {
  {
    MutexLock lock(&mu_);
    DetachReaders();
    run_id_ = run_id;
    round_ = round;
    global_step_ = global_step;
    values_ = std::move(values);
    momentum_ = std::move(momentum);
  }
  if (on_change_) on_change_(run_id, round, global_step);
}

void HeldModel::Commit(int64_t round, int64_t global_step, absl::FunctionRef<void()> apply) {
  std::string run_id;
  {
    MutexLock lock(&mu_);
    DetachReaders();
    apply();
    round_ = round;
    global_step_ = global_step;
    run_id = run_id_;
  }
  if (on_change_) on_change_(run_id, round, global_step);
}

absl::StatusOr<HeldModel::Lease> HeldModel::Open(const std::string& run_id, int64_t round,
                                                 int64_t chunk_values, int begin_chunk,
                                                 int end_chunk, bool momentum) {
  MutexLock lock(&mu_);
  if (values_.empty()) return absl::FailedPreconditionError("this node leader holds no model");
  if (run_id != run_id_ || round != round_) {
    return absl::FailedPreconditionError(absl::StrCat("this node leader holds round ", round_,
                                                      " of run ", run_id_, ", not round ", round,
                                                      " of run ", run_id));
  }
  if (chunk_values <= 0) return absl::InvalidArgumentError("chunk_values: must be positive");
  const ChunkLayout layout{static_cast<int64_t>(values_.size()), chunk_values};
  if (end_chunk == -1) end_chunk = layout.num_chunks();
  if (begin_chunk < 0 || end_chunk < begin_chunk || end_chunk > layout.num_chunks()) {
    return absl::InvalidArgumentError(absl::StrCat("begin_chunk, end_chunk: [", begin_chunk, ", ",
                                                   end_chunk, ") is not a range of the model's ",
                                                   layout.num_chunks(), " chunks"));
  }
  Reader reader;
  reader.layout = layout;
  reader.end_chunk = end_chunk;
  reader.momentum = momentum && !momentum_.empty();
  reader.next[0] = reader.next[1] = begin_chunk;
  const int64_t id = next_lease_++;
  readers_[id] = std::move(reader);
  return Lease{id, global_step_, layout, readers_[id].momentum};
}

absl::StatusOr<int> HeldModel::Read(int64_t lease, bool momentum, std::string* out) {
  MutexLock lock(&mu_);
  auto it = readers_.find(lease);
  if (it == readers_.end()) return absl::InvalidArgumentError("no such lease");
  Reader& reader = it->second;
  const int b = momentum ? 1 : 0;
  if (momentum && !reader.momentum) return absl::InvalidArgumentError("no momentum leased");
  const int chunk = reader.next[b];
  if (chunk >= reader.end_chunk) return absl::OutOfRangeError("the lease's range is read");
  const int64_t begin = reader.layout.begin(chunk);
  const float* from = reader.detached ? reader.aside[b].data() + (begin - reader.aside_from[b])
                                      : (momentum ? momentum_ : values_).data() + begin;
  out->assign(reinterpret_cast<const char*>(from),
              static_cast<size_t>(reader.layout.size(chunk)) * sizeof(float));
  ++reader.next[b];
  return chunk;
}

void HeldModel::Close(int64_t lease) {
  MutexLock lock(&mu_);
  readers_.erase(lease);
}

}  // namespace localsgd
