// EXERCISE 7.4
// Ring attention's online softmax (Milakov and Gimelshein 2018; Liu et al.
// 2023): a row's attention over all keys, assembled a block of keys at a time.
//
// Over a set of keys the row has its output o, the values weighted by the
// softmax of its scores, and lse = log(sum of exp(score)). Two sets, A and B:
//
//   lse = log(exp(lse_A) + exp(lse_B))        = max + log(1 + exp(min - max))
//   o   = exp(lse_A - lse) o_A + exp(lse_B - lse) o_B
//
// since each set's exp(score) sums to exp(lse_X) of the whole's exp(lse).
// Take the log-sum-exp through the max as written: exp(lse) of a long row
// overflows a float. lse = -inf (no keys yet, o all zeros) must come out as
// the block alone.
//
// std::log1p, std::exp; std::abs(-inf) is inf, and exp(-inf) is 0.
// Grade it: ./labkit grade tp; run the lab on it: ./labkit mine tp
#include <algorithm>
#include <cmath>

#include "labkit/parallel/ring_attention.h"

namespace labkit {

void merge_attention(std::span<float> out, float& lse, std::span<const float> block_out, float block_lse) {
  // TODO: the merged log-sum-exp, through the larger of lse and block_lse;
  //       then each out[i] weighted by exp(lse - merged) plus block_out[i] by exp(block_lse - merged).
  (void)out, (void)lse, (void)block_out, (void)block_lse;
}

}  // namespace labkit
