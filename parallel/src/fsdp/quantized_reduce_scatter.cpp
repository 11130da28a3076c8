#include "labkit/parallel/quantized_reduce_scatter.h"

#include <cstdint>

#include "labkit/error.h"
#include "labkit/parallel/quantize.h"
#include "labkit/scratch.h"
#include "labkit/tensor.h"

namespace labkit {

namespace {

constexpr int kBits = 4;

// One all-to-all hop: `values` (blocks of `block` floats, one per rank of
// `group`) quantized block by block, exchanged, and what arrives dequantized
// and added into `sum` (`block` floats), all where the buffers live.
// Payload-free (null values): the exchange alone.
void quantized_exchange_and_add(Comm& group, const float* values, std::size_t block, float* sum) {
  const std::size_t p = std::size_t(group.size()), bytes = quantized_bytes(block, kBits);
  if (!values) {
    group.all_to_all(meta_view(p * bytes, DType::u8), meta_view(p * bytes, DType::u8));
    return;
  }
  const Device& d = device_of(values);
  TensorOf<std::uint8_t> send({p * bytes}, d.kind), recv({p * bytes}, d.kind);
  for (std::size_t r = 0; r < p; ++r) quantize({values + r * block, block}, {send.data() + r * bytes, bytes}, kBits);
  group.all_to_all(view_of(send), view_of(recv));
  Tensor arrived({block}, d.kind);
  d.fill(sum, 0.0f, long(block));
  for (std::size_t r = 0; r < p; ++r) {
    dequantize({recv.data() + r * bytes, bytes}, {arrived.data(), block}, kBits);
    d.axpy(sum, 1.0f, arrived.data(), long(block));
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
  // Hop 1: rank j of the node gets, from each rank of it, the shards k G + j
  // of every node k, side by side; it adds them into its node's partial sums.
  const Scratch reordered(full, payload ? full.count : 0), partial(full, payload ? n * s : 0);
  if (payload)
    for (std::size_t j = 0; j < g; ++j)
      for (std::size_t k = 0; k < n; ++k)
        copy_local(reordered.view().slice((j * n + k) * s, s), full.slice((k * g + j) * s, s));
  const auto floats = [](const Scratch& b) { return static_cast<float*>(b.view().data); };
  quantized_exchange_and_add(node, floats(reordered), n * s, floats(partial));
  // Hop 2: node k's partial sum of this rank's shard comes from the rank at
  // this place on node k. One node: the partial sums are the sums.
  if (n > 1) {
    quantized_exchange_and_add(across, floats(partial), s, static_cast<float*>(shard.data));
  } else if (payload) {
    copy_local(shard, partial.view());
  }
  if (payload) device_of(shard.data).divide(DType::f32, shard.data, s, int(g * n));
}

}  // namespace labkit
