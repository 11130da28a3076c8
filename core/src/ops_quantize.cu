// ZeRO++'s block-wise quantization on a GPU (labkit/ops.h; ops_quantize.cpp on
// the CPU): one thread per block to quantize (its largest magnitude, then its
// values; a block's nibbles fill whole bytes, since blocks start at even
// indices), one thread per value to dequantize.
#include "labkit/ops_cuda.h"

#include <cuda_runtime.h>

#include "cuda_support.h"

namespace labkit::ops::cuda {

using namespace cuda_launch;

namespace {

__device__ long blocks_of(long count) { return (count + kQuantBlock - 1) / kQuantBlock; }

// A block's scale is a float at any byte: a chunk of a larger message (a rank's
// share of qgZ's all-to-all) starts where the chunk before it ended.
__device__ void store_scale(unsigned char* out, long b, float scale) { memcpy(out + b * sizeof(float), &scale, sizeof scale); }
__device__ float load_scale(const unsigned char* in, long b) {
  float scale;
  memcpy(&scale, in + b * sizeof(float), sizeof scale);
  return scale;
}

__global__ void quantize_kernel(unsigned char* out, const float* x, long count, int bits) {
  const long b = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= blocks_of(count)) return;
  unsigned char* values = out + blocks_of(count) * long(sizeof(float));
  const long begin = b * kQuantBlock, end = min(count, begin + kQuantBlock);
  float largest = 0;
  for (long i = begin; i < end; ++i) largest = fmaxf(largest, fabsf(x[i]));
  const float scale = largest / float((1 << (bits - 1)) - 1);
  store_scale(out, b, scale);
  for (long i = begin; i < end; ++i) {
    const int level = scale > 0 ? int(lroundf(x[i] / scale)) : 0;
    if (bits == 8) {
      values[i] = (unsigned char)(signed char)(level);
    } else {
      const int shift = i % 2 ? 4 : 0;
      values[i / 2] = (unsigned char)((values[i / 2] & ~(0xF << shift)) | ((level & 0xF) << shift));
    }
  }
}

__global__ void dequantize_kernel(float* x, const unsigned char* in, long count, int bits) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const unsigned char* values = in + blocks_of(count) * long(sizeof(float));
  const float scale = load_scale(in, i / kQuantBlock);
  int level;
  if (bits == 8) {
    level = (signed char)(values[i]);
  } else {
    const int nibble = (values[i / 2] >> (i % 2 ? 4 : 0)) & 0xF;
    level = nibble >= 8 ? nibble - 16 : nibble;
  }
  x[i] = float(level) * scale;
}

}  // namespace

void quantize(unsigned char* out, const float* x, long count, int bits) {
  launch("quantize", quantize_kernel, blocks((count + kQuantBlock - 1) / kQuantBlock), stream(), out, x, count, bits);
}

void dequantize(float* x, const unsigned char* in, long count, int bits) {
  launch("dequantize", dequantize_kernel, blocks(count), stream(), x, in, count, bits);
}

}  // namespace labkit::ops::cuda
