// ZeRO++'s quantized gradient reduce, qgZ (Wang et al. 2023, section 3.3): a
// reduce-scatter (avg) that sends int4 blocks (quantize.h) in two all-to-all
// hops where a ring would send fp32 (or bf16) around every rank. A ring cannot
// simply carry int4: each of its P-1 steps would dequantize, add and quantize
// again, piling up the error; each hop here quantizes once and adds in fp32.
//
// The P = n x G ranks are n nodes of G, world rank k G + j being rank j of
// node k, and rank r keeps shard r of the reduced gradients.
//   hop 1, inside each node: every rank sends rank j of its node the shards
//     j, G + j, 2G + j, ... (one on every node: the paper's tensor slice
//     reordering), and rank j adds what its node sent it;
//   hop 2, across the nodes, among the ranks at the same place j of theirs:
//     each sends node k's rank j its partial sum of shard k G + j, and adds.
// What leaves a node is the node's partial sums of the other nodes' shards,
// (n-1)/n of the gradients, in 4 bits: an eighth of a ring's fp32 bytes and a
// quarter of its bf16 ones (the paper's M -> 0.25M), the scales aside.
#pragma once

#include "labkit/comm.h"

namespace labkit {

// `full`: this rank's P x S gradients (f32, padded: shard r at [r S, (r+1) S));
// `shard`: S elements out, the mean over the P ranks of shard `rank`. `node`:
// the G ranks of this rank's node; `across`: the n ranks at this rank's place
// in theirs, node order. Payload-free views (no data) send the sizes alone.
void quantized_reduce_scatter(Comm& node, Comm& across, View full, View shard);

}  // namespace labkit
