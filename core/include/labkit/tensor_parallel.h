// Megatron-LM's two ways to split a Linear layer y = x W^T + b, W of shape
// (OC, C) (Shoeybi et al. 2019, "Megatron-LM", section 3):
//
//   column-parallel: rank i keeps rows [i OC/p, (i+1) OC/p) of W and of b (a
//     slice of the output features) and computes that slice of y in full;
//   row-parallel: rank i keeps columns [i C/p, (i+1) C/p) of W (a slice of the
//     input features) and computes a partial y from its slice of x; an
//     all-reduce sums the partials, and the bias is added once, after.
//
// An MLP splits its first Linear by columns and its second by rows, so the
// activation between them never moves: one all-reduce per MLP (their f and g).
#pragma once

#include <span>
#include <vector>

namespace labkit {

std::vector<float> column_shard(std::span<const float> weight, int OC, int C, int parts, int index);  // (OC/p, C)
std::vector<float> row_shard(std::span<const float> weight, int OC, int C, int parts, int index);     // (OC, C/p)

}  // namespace labkit
