// Chunk handling: the range reducer driven by an arbitrary sequence of member actions
// (weights, encoded chunks of any index and size, drops, screening, commits and aborts) never
// crashes, and the global model it keeps stays finite.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "exchange/range_reducer.h"

namespace {

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::string Bytes(size_t n) {
    n = std::min(n, size_ - pos_);
    std::string out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  localsgd::RangeReducer::Options options;
  const localsgd::v1::Codec codecs[] = {localsgd::v1::CODEC_FP32, localsgd::v1::CODEC_BF16,
                                        localsgd::v1::CODEC_FP16, localsgd::v1::CODEC_INT8};
  options.codec = codecs[in.Byte() % 4];
  options.layout = localsgd::ChunkLayout{1 + in.Byte() % 200, 64};
  options.outer.momentum = in.Byte() % 2 == 0 ? 0.0 : 0.9;
  options.outer.nesterov = options.outer.momentum != 0;
  options.max_norm_ratio = in.Byte() % 2 == 0 ? 0.0 : 3.0;
  localsgd::RangeReducer engine(options, std::vector<float>(options.layout.num_values, 0.5f));
  bool open = false;
  std::vector<float> decoded;
  while (!in.empty()) {
    const uint8_t op = in.Byte() % 7;
    const int slot = in.Byte() % 5 - 1;  // -1 and 4 are out of range for most rounds
    switch (op) {
      case 0:
        engine.BeginRound(1 + in.Byte() % 4);
        open = true;
        break;
      case 1:
        if (open) engine.deltas().SetWeight(slot, (in.Byte() % 5) - 1.0).IgnoreError();
        break;
      case 2: {
        if (!open) break;
        const int chunk = in.Byte() % 6 - 1;
        const std::string bytes = in.Bytes(in.Byte() * 2);
        if (engine.deltas().DecodeChunk(chunk, bytes, &decoded).ok()) {
          engine.deltas().Accumulate(slot, chunk, decoded).IgnoreError();
        }
        break;
      }
      case 3:
        if (open) engine.deltas().Drop(slot);
        break;
      case 4:
        if (open && !engine.TakeCompleted().ok()) {
          engine.Abort();
          open = false;
        }
        engine.deltas().TakeExclusions();
        break;
      case 5:
        if (open && engine.AllComplete()) {
          engine.Commit();
          open = false;
        }
        break;
      case 6:
        if (open) engine.Abort();
        open = false;
        break;
    }
  }
  for (float v : engine.global()) {
    if (!std::isfinite(v)) std::abort();
  }
  return 0;
}
