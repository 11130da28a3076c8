// STUB: // EXERCISE 3.3
// The KV cache of autoregressive inference: every layer keeps a key and a value
// vector per KV head for every token of every sequence in the batch, so the
// next token attends to them without recomputing.
//
//   bytes = 2 (K and V) x batch x seq x layers x kv_heads x head_dim x bytes per element
//
// Grouped-query attention (kv_heads < heads; LLaMA-2 70B has 8 for 64 query
// heads) shrinks it by heads / kv_heads.
// STUB: // Grade it: ./labkit grade memory; run the lab on it: ./labkit mine memory
#include "labkit/memory.h"

namespace labkit::memory {

double kv_cache_bytes(const KvShape& x) {
  // BEGIN EXERCISE: the formula above; bytes_per_element(x.dtype) gives the last factor.
  // STUB: (void)x;
  // STUB: return 0;
  return 2 * x.batch * x.seq * x.layers * x.kv_heads * x.head_dim * bytes_per_element(x.dtype);
  // END EXERCISE
}

}  // namespace labkit::memory
