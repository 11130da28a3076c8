// A typed, non-owning view of a buffer: what every Comm call takes. Plain
// pointer + count + dtype, like NCCL's (buff, count, datatype) triple.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "labkit/dtype.h"

namespace labkit {

struct View {
  void* data = nullptr;  // null in a payload-free run (meta_view): only the size travels
  std::size_t count = 0;
  DType dtype = DType::f32;

  std::size_t bytes() const { return count * size_of(dtype); }
  // Elements [offset, offset + n) of this view.
  View slice(std::size_t offset, std::size_t n) const {
    return {data ? static_cast<std::byte*>(data) + offset * size_of(dtype) : nullptr, n, dtype};
  }
};

template <class T> View view_of(std::span<T> s) { return {s.data(), s.size(), dtype_of<T>()}; }
template <class T> View view_of(std::vector<T>& v) { return {v.data(), v.size(), dtype_of<T>()}; }
// A meta view: a size and a dtype with no data behind it, what PyTorch calls a
// tensor on the meta device (https://pytorch.org/docs/stable/meta.html). The
// simulator moves its size only, so a payload-free what-if runs at scale.
inline View meta_view(std::size_t count, DType dtype) { return {nullptr, count, dtype}; }

}  // namespace labkit
