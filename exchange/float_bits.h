#ifndef LOCALSGD_EXCHANGE_FLOAT_BITS_H_
#define LOCALSGD_EXCHANGE_FLOAT_BITS_H_

#include <cstdint>
#include <cstring>

namespace localsgd {

// 1 when the fp32 bit pattern `u` is NaN or infinite (an exponent of all ones), else 0.
// Branch-free, so that loops OR-ing it over many values vectorise.
inline uint32_t NotFiniteBits(uint32_t u) {
  return static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
}

inline uint32_t NotFinite(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return NotFiniteBits(u);
}

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_FLOAT_BITS_H_
