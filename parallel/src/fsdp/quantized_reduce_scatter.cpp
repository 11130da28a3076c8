#include "labkit/parallel/quantized_reduce_scatter.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "labkit/error.h"
#include "labkit/parallel/quantize.h"

namespace labkit {

namespace {

constexpr int kBits = 4;

// One all-to-all hop: `values` (blocks of `block` floats, one per rank of
// `group`) quantized block by block, exchanged, and what arrives dequantized
// and added into `sum` (`block` floats). Payload-free: the exchange alone.
void quantized_exchange_and_add(Comm& group, std::span<const float> values, std::size_t block, std::span<float> sum) {
  const std::size_t p = std::size_t(group.size()), bytes = quantized_bytes(block, kBits);
  if (values.empty()) {
    group.all_to_all(meta_view(p * bytes, DType::u8), meta_view(p * bytes, DType::u8));
    return;
  }
  std::vector<std::uint8_t> send(p * bytes), recv(p * bytes);
  for (std::size_t r = 0; r < p; ++r) quantize(values.subspan(r * block, block), {send.data() + r * bytes, bytes}, kBits);
  group.all_to_all({send.data(), send.size(), DType::u8}, {recv.data(), recv.size(), DType::u8});
  std::vector<float> arrived(block);
  std::fill(sum.begin(), sum.end(), 0.0f);
  for (std::size_t r = 0; r < p; ++r) {
    dequantize({recv.data() + r * bytes, bytes}, arrived, kBits);
    for (std::size_t i = 0; i < block; ++i) sum[i] += arrived[i];
  }
}

}  // namespace

void quantized_reduce_scatter(Comm& node, Comm& across, View full, View shard) {
  const std::size_t g = std::size_t(node.size()), n = std::size_t(across.size()), s = shard.count;
  if (full.dtype != DType::f32 || shard.dtype != DType::f32)
    fail(node.who(), "quantized_reduce_scatter", "full and shard must be f32 (got {} and {})", name_of(full.dtype),
         name_of(shard.dtype));
  if (full.count != g * n * s)
    fail(node.who(), "quantized_reduce_scatter", "full count {} is not {} nodes x {} ranks x shard {}", full.count, n,
         g, s);
  const bool payload = full.data != nullptr;
  const std::span<const float> grads = payload ? std::span(static_cast<const float*>(full.data), full.count)
                                               : std::span<const float>();
  // Hop 1: rank j of the node gets, from each rank of it, the shards k G + j
  // of every node k, side by side; it adds them into its node's partial sums.
  std::vector<float> reordered(payload ? full.count : 0), partial(payload ? n * s : 0);
  if (payload)
    for (std::size_t j = 0; j < g; ++j)
      for (std::size_t k = 0; k < n; ++k)
        std::copy_n(grads.begin() + (k * g + j) * s, s, reordered.begin() + (j * n + k) * s);
  quantized_exchange_and_add(node, reordered, n * s, partial);
  // Hop 2: node k's partial sum of this rank's shard comes from the rank at
  // this place on node k. One node: the partial sums are the sums.
  float* out = static_cast<float*>(shard.data);
  if (n > 1) {
    quantized_exchange_and_add(across, partial, s, payload ? std::span(out, s) : std::span<float>());
  } else if (payload) {
    std::copy(partial.begin(), partial.end(), out);
  }
  if (payload)
    for (std::size_t i = 0; i < s; ++i) out[i] /= float(g * n);
}

}  // namespace labkit
