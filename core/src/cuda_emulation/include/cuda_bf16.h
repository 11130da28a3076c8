// bfloat16 for the CPU's CUDA (cuda_runtime.h beside this): converts to and
// from float as CUDA's __nv_bfloat16 does, by labkit's host conversions.
#pragma once

#include "labkit/dtype.h"

struct __nv_bfloat16 {
  labkit::bfloat16 value;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : value(labkit::to_bf16(f)) {}                // NOLINT: implicit, as CUDA's
  operator float() const { return labkit::to_float(value); }            // NOLINT
};
