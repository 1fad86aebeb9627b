#include "common/malloc_tuning.h"

#include <malloc.h>

namespace localsgd {

void TuneMallocForLargeBuffers() {
  // 32 MiB is the largest threshold glibc accepts on 64-bit systems (a larger one is refused).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

}  // namespace localsgd
