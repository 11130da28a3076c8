// Grader corpus: kv_cache_bytes with a mistake learners make: recurses on the same shape: the stack runs out.
#include "labkit/memory.h"

namespace labkit::memory {

double kv_cache_bytes(const KvShape& x) {
  volatile char frame[256] = {};
  if (x.batch > 0) return frame[0] + kv_cache_bytes(x);
  return 2 * x.batch * x.seq * x.layers * x.kv_heads * x.head_dim * bytes_per_element(x.dtype);
}

}  // namespace labkit::memory
