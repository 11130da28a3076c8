// Rows moved by index on the CPU (labkit/ops.h): the MoE layer's dispatch and combine.
#include "labkit/ops.h"

namespace labkit::ops {

void gather_rows(float* dst, const float* src, const int* index, const float* weights, long n, int C) {
  for (long i = 0; i < n; ++i) {
    const float* from = src + long(index[i]) * C;
    float* to = dst + i * C;
    for (int c = 0; c < C; ++c) to[c] = weights ? weights[i] * from[c] : from[c];
  }
}

void scatter_add_rows(float* dst, const float* src, const int* index, const float* weights, long n, int C) {
  for (long i = 0; i < n; ++i) {
    const float* from = src + i * C;
    float* to = dst + long(index[i]) * C;
    for (int c = 0; c < C; ++c) to[c] += weights ? weights[i] * from[c] : from[c];
  }
}

void row_dots(float* out, const float* a, const int* index, const float* b, long n, int C) {
  for (long i = 0; i < n; ++i) {
    const float* x = a + long(index[i]) * C;
    const float* y = b + i * C;
    float sum = 0;
    for (int c = 0; c < C; ++c) sum += x[c] * y[c];
    out[i] = sum;
  }
}

}  // namespace labkit::ops
