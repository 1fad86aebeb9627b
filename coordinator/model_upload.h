#ifndef LOCALSGD_COORDINATOR_MODEL_UPLOAD_H_
#define LOCALSGD_COORDINATOR_MODEL_UPLOAD_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "exchange/chunking.h"
#include "exchange/model_digest.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// An InitModel upload as it arrives (docs/design.md, "Where the model lives"): each chunk is
// checked (index, size, once, finite values) and then kept, for a star run, whose model the
// coordinator holds, or only digested, for a sharded run, whose model lives with its members:
// then memory does not grow with the model. Thread-compatible.
class ModelUpload {
 public:
  // A model of `layout`, with its outer momentum's chunks after the values' when
  // `has_momentum`; `keep_values`: a star run's. `keeps_momentum`: the run keeps an outer
  // momentum, zero where none is uploaded (what the digests then count).
  ModelUpload(ChunkLayout layout, bool has_momentum, bool keep_values, bool keeps_momentum);

  // Chunk `chunk` of the values, or of the momentum: INVALID_ARGUMENT naming the field.
  absl::Status Take(bool momentum, v1::Chunk* chunk);
  // Every chunk came; INVALID_ARGUMENT saying how many did otherwise.
  absl::Status Complete() const;

  const ChunkLayout& layout() const { return layout_; }
  bool keeps_values() const { return keep_values_; }
  // After Complete, when kept: the values and the momentum (nullopt without one). Each once.
  std::vector<float> TakeValues();
  std::optional<std::vector<float>> TakeMomentum();
  // After Complete, when not kept: each chunk's digests (ChunkDigest), by chunk.
  std::vector<DigestPair> ChunkDigests() const;

 private:
  std::vector<float> Assemble(std::map<int, std::string>& chunks) const;

  const ChunkLayout layout_;
  const bool has_momentum_;
  const bool keep_values_;
  const bool keeps_momentum_;
  // By buffer (0: values, 1: momentum): the fp32 bytes by chunk when kept, else their LaneCrc.
  std::map<int, std::string> kept_[2];
  std::map<int, LaneCrc> digested_[2];
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_MODEL_UPLOAD_H_
