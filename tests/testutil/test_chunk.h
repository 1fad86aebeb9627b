#ifndef LOCALSGD_TESTS_TESTUTIL_TEST_CHUNK_H_
#define LOCALSGD_TESTS_TESTUTIL_TEST_CHUNK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd::testing {

// Chunk `index` with `bytes` bytes of data that differ from byte to byte (no two neighbours
// alike), for tests of the wire form.
inline v1::Chunk MakeChunk(int32_t index, size_t bytes) {
  v1::Chunk chunk;
  chunk.set_index(index);
  std::string data(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(i * 131 + 7);
  chunk.set_data(std::move(data));
  return chunk;
}

}  // namespace localsgd::testing

#endif  // LOCALSGD_TESTS_TESTUTIL_TEST_CHUNK_H_
