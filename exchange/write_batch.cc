#include "exchange/write_batch.h"

namespace localsgd {

grpc::WriteOptions WriteBatch::Next(int64_t bytes, bool more) {
  grpc::WriteOptions options;
  if (more && !first_ && held_bytes_ + bytes < max_held_bytes_) {
    options.set_buffer_hint();
    held_bytes_ += bytes;
  } else {
    held_bytes_ = 0;  // this message goes out, with those held before it
  }
  first_ = false;
  return options;
}

}  // namespace localsgd
