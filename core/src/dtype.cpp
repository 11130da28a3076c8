#include "labkit/dtype.h"

#include "labkit/device.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

namespace labkit {

namespace {
constexpr std::array kDTypeNames = {"f32", "f64", "i32", "i64"};
constexpr std::array kOpNames = {"sum", "prod", "min", "max", "avg"};

template <class T>
void reduce_typed(ReduceOp op, const T* in, T* inout, std::size_t n) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:  // summed here, divided once at the end (divide_local)
      for (std::size_t i = 0; i < n; ++i) inout[i] += in[i];
      return;
    case ReduceOp::prod:
      for (std::size_t i = 0; i < n; ++i) inout[i] *= in[i];
      return;
    case ReduceOp::min:
      for (std::size_t i = 0; i < n; ++i) inout[i] = std::min(inout[i], in[i]);
      return;
    case ReduceOp::max:
      for (std::size_t i = 0; i < n; ++i) inout[i] = std::max(inout[i], in[i]);
      return;
  }
}

template <class T>
void divide_typed(T* inout, std::size_t n, int divisor) {
  for (std::size_t i = 0; i < n; ++i) inout[i] /= static_cast<T>(divisor);
}
}  // namespace

std::size_t size_of(DType dtype) {
  switch (dtype) {
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
  }
  return 0;
}

std::string_view name_of(DType dtype) { return kDTypeNames[static_cast<int>(dtype)]; }
std::string_view name_of(ReduceOp op) { return kOpNames[static_cast<int>(op)]; }

DType parse_dtype(std::string_view name) {
  for (std::size_t i = 0; i < kDTypeNames.size(); ++i)
    if (name == kDTypeNames[i]) return static_cast<DType>(i);
  throw std::invalid_argument("unknown dtype '" + std::string(name) + "' (f32, f64, i32, i64)");
}

ReduceOp parse_reduce_op(std::string_view name) {
  for (std::size_t i = 0; i < kOpNames.size(); ++i)
    if (name == kOpNames[i]) return static_cast<ReduceOp>(i);
  throw std::invalid_argument("unknown reduce op '" + std::string(name) + "' (sum, prod, min, max, avg)");
}

void reduce_local(ReduceOp op, DType dtype, const void* in, void* inout, std::size_t count) {
  if (!in || !inout) return;
  if (const Device& d = device_of(inout); d.kind != DeviceKind::cpu) return d.reduce(op, dtype, in, inout, count);
  switch (dtype) {
    case DType::f32: return reduce_typed(op, static_cast<const float*>(in), static_cast<float*>(inout), count);
    case DType::f64: return reduce_typed(op, static_cast<const double*>(in), static_cast<double*>(inout), count);
    case DType::i32: return reduce_typed(op, static_cast<const std::int32_t*>(in), static_cast<std::int32_t*>(inout), count);
    case DType::i64: return reduce_typed(op, static_cast<const std::int64_t*>(in), static_cast<std::int64_t*>(inout), count);
  }
}

void divide_local(DType dtype, void* inout, std::size_t count, int divisor) {
  if (const Device& d = device_of(inout); inout && d.kind != DeviceKind::cpu) return d.divide(dtype, inout, count, divisor);
  if (!inout) return;
  switch (dtype) {
    case DType::f32: return divide_typed(static_cast<float*>(inout), count, divisor);
    case DType::f64: return divide_typed(static_cast<double*>(inout), count, divisor);
    case DType::i32: return divide_typed(static_cast<std::int32_t*>(inout), count, divisor);
    case DType::i64: return divide_typed(static_cast<std::int64_t*>(inout), count, divisor);
  }
}

}  // namespace labkit
