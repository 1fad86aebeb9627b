#include "common/model_store.h"

#include <google/protobuf/io/coded_stream.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "proto/localsgd/v1/state.pb.h"

namespace localsgd {
namespace {

// fp32 values as the little-endian bytes of the hosts we run on (x86-64, aarch64).
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "model.bin is little-endian");

absl::string_view Bytes(absl::Span<const float> values) {
  return absl::string_view(reinterpret_cast<const char*>(values.data()),
                           values.size() * sizeof(float));
}

// The key and length of a protobuf bytes field `field` of `size` bytes, as the wire has them.
std::string BytesFieldPrefix(int field, size_t size) {
  std::string prefix;
  for (uint64_t v : {static_cast<uint64_t>(field) << 3 | 2, static_cast<uint64_t>(size)}) {
    for (; v >= 0x80; v >>= 7) prefix.push_back(static_cast<char>((v & 0x7f) | 0x80));
    prefix.push_back(static_cast<char>(v));
  }
  return prefix;
}

bool Floats(const std::string& bytes, std::vector<float>* out) {
  if (bytes.size() % sizeof(float) != 0) return false;
  out->resize(bytes.size() / sizeof(float));
  if (!bytes.empty()) std::memcpy(out->data(), bytes.data(), bytes.size());
  return true;
}

}  // namespace

absl::StatusOr<ModelStore> ModelStore::Open(const std::string& state_dir) {
  if (absl::Status status = MakeDirectories(state_dir); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat("--state_dir: ", status.message()));
  }
  return ModelStore(absl::StrCat(state_dir, "/model.bin"));
}

absl::StatusOr<std::optional<ModelCheckpoint>> ModelStore::Load() const {
  absl::StatusOr<std::string> bytes = ReadChecksummedFile(path_);
  if (absl::IsNotFound(bytes.status())) return std::optional<ModelCheckpoint>();
  LOCALSGD_RETURN_IF_ERROR(bytes.status());
  v1::SavedModel saved;
  ModelCheckpoint checkpoint;
  if (!saved.ParseFromString(*bytes) || !Floats(saved.global(), &checkpoint.global) ||
      !Floats(saved.momentum(), &checkpoint.momentum) || saved.round() < 0 ||
      saved.global_step() < 0) {
    return absl::DataLossError(
        absl::StrCat(path_, " is corrupt (not a SavedModel); move it away to start afresh"));
  }
  // Every saved model was finite (a commit that is not aborts): anything else was changed on
  // disk, and training from it would spread NaN to every member.
  for (const std::vector<float>* values : {&checkpoint.global, &checkpoint.momentum}) {
    for (size_t i = 0; i < values->size(); ++i) {
      if (!std::isfinite((*values)[i])) {
        return absl::DataLossError(
            absl::StrCat(path_, " is corrupt (value ", i,
                         values == &checkpoint.global ? " of the model" : " of the momentum",
                         " is ", (*values)[i], "); move it away to start afresh"));
      }
    }
  }
  checkpoint.run_id = saved.run_id();
  checkpoint.round = saved.round();
  checkpoint.global_step = saved.global_step();
  return std::optional<ModelCheckpoint>(std::move(checkpoint));
}

absl::StatusOr<std::optional<ModelStore::Label>> ModelStore::Peek() const {
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    if (access(path_.c_str(), F_OK) != 0) return std::optional<Label>();
    return absl::PermissionDeniedError(absl::StrCat("cannot read ", path_));
  }
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  const size_t newline = head.find('\n');
  auto corrupt = [&] {
    return absl::DataLossError(absl::StrCat(path_, " is corrupt (no SavedModel label)"));
  };
  if (newline == std::string::npos) return corrupt();
  // run_id, round and global_step come first (Begin writes them before the values).
  google::protobuf::io::CodedInputStream fields(
      reinterpret_cast<const uint8_t*>(head.data() + newline + 1),
      static_cast<int>(head.size() - newline - 1));
  Label label;
  while (true) {
    const uint32_t tag = fields.ReadTag();
    const int field = static_cast<int>(tag >> 3);
    uint64_t number = 0;
    if (field == v1::SavedModel::kRunIdFieldNumber && (tag & 7) == 2) {
      uint32_t length = 0;
      if (!fields.ReadVarint32(&length) || length > 1024 ||
          !fields.ReadString(&label.run_id, static_cast<int>(length))) {
        return corrupt();
      }
    } else if ((field == v1::SavedModel::kRoundFieldNumber ||
                field == v1::SavedModel::kGlobalStepFieldNumber) &&
               (tag & 7) == 0 && fields.ReadVarint64(&number)) {
      (field == v1::SavedModel::kRoundFieldNumber ? label.round : label.global_step) =
          static_cast<int64_t>(number);
    } else if (field == v1::SavedModel::kGlobalFieldNumber ||
               field == v1::SavedModel::kMomentumFieldNumber) {
      return std::optional<Label>(std::move(label));
    } else {
      return corrupt();
    }
  }
}

absl::Status ModelStore::Save(const std::string& run_id, int64_t round, int64_t global_step,
                              absl::Span<const float> global,
                              absl::Span<const float> momentum) const {
  LOCALSGD_ASSIGN_OR_RETURN(Writer writer,
                            Begin(run_id, round, global_step, static_cast<int64_t>(global.size()),
                                  static_cast<int64_t>(momentum.size())));
  LOCALSGD_RETURN_IF_ERROR(writer.AppendGlobal(Bytes(global)));
  LOCALSGD_RETURN_IF_ERROR(writer.AppendMomentum(Bytes(momentum)));
  return writer.Commit();
}

absl::StatusOr<ModelStore::Writer> ModelStore::Begin(const std::string& run_id, int64_t round,
                                                     int64_t global_step, int64_t global_values,
                                                     int64_t momentum_values) const {
  // A SavedModel on the wire, its two large fields written as their bytes come (a parser
  // takes fields in any order): no copy of the model is made.
  v1::SavedModel small;
  small.set_run_id(run_id);
  small.set_round(round);
  small.set_global_step(global_step);
  const std::string head = small.SerializeAsString();
  const uint64_t global_bytes = static_cast<uint64_t>(global_values) * sizeof(float);
  const uint64_t momentum_bytes = static_cast<uint64_t>(momentum_values) * sizeof(float);
  const std::string global_prefix =
      BytesFieldPrefix(v1::SavedModel::kGlobalFieldNumber, global_bytes);
  const uint64_t length =
      head.size() + global_prefix.size() + global_bytes +
      BytesFieldPrefix(v1::SavedModel::kMomentumFieldNumber, momentum_bytes).size() +
      momentum_bytes;
  LOCALSGD_ASSIGN_OR_RETURN(ChecksummedFileWriter file, ChecksummedFileWriter::Open(path_, length));
  LOCALSGD_RETURN_IF_ERROR(file.Append(head));
  LOCALSGD_RETURN_IF_ERROR(file.Append(global_prefix));
  return Writer(std::move(file), global_bytes, momentum_bytes);
}

absl::Status ModelStore::Writer::AppendGlobal(absl::string_view bytes) {
  if (momentum_begun_ || bytes.size() > global_left_) {
    return absl::InvalidArgumentError("more of the model's values than the save was begun with");
  }
  global_left_ -= bytes.size();
  return file_.Append(bytes);
}

absl::Status ModelStore::Writer::AppendMomentum(absl::string_view bytes) {
  if (!momentum_begun_) {
    if (global_left_ != 0) {
      return absl::InvalidArgumentError("the momentum before all of the model's values");
    }
    momentum_begun_ = true;
    LOCALSGD_RETURN_IF_ERROR(
        file_.Append(BytesFieldPrefix(v1::SavedModel::kMomentumFieldNumber, momentum_bytes_)));
  }
  return file_.Append(bytes);
}

absl::Status ModelStore::Writer::Commit() {
  if (!momentum_begun_) LOCALSGD_RETURN_IF_ERROR(AppendMomentum(""));
  return file_.Commit();
}

}  // namespace localsgd
