// A tensor: a shape and a run of elements on one Device (host or GPU memory),
// row-major, owned and reference-counted (copies share the memory, as
// PyTorch's do; clone() copies it). Float for values, int for token ids.
// On the CPU it is also a range of floats, so host code can index it.
#pragma once

#include <cstddef>
#include <memory>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "labkit/device.h"
#include "labkit/view.h"

namespace labkit {

template <class T> class TensorOf {
 public:
  TensorOf() = default;
  // Zero-filled.
  explicit TensorOf(std::vector<std::size_t> shape, DeviceKind where = DeviceKind::cpu)
      : shape_(std::move(shape)), device_(&labkit::device(where)) {
    const std::size_t bytes = size() * sizeof(T);
    const Device* d = device_;
    data_ = std::shared_ptr<T>(static_cast<T*>(d->allocate(bytes)), [d](T* p) { d->release(p); });
  }
  static TensorOf from_host(std::span<const T> values, std::vector<std::size_t> shape, DeviceKind where) {
    TensorOf t(std::move(shape), where);
    if (values.size() != t.size()) throw std::invalid_argument("tensor: " + std::to_string(values.size()) +
                                                               " values for " + std::to_string(t.size()) + " elements");
    t.device_->copy_from_host(t.data(), values.data(), values.size_bytes());
    return t;
  }

  const std::vector<std::size_t>& shape() const { return shape_; }
  std::size_t size() const {  // 0 for an empty (default-constructed) tensor
    return data_ || !shape_.empty() ? std::accumulate(shape_.begin(), shape_.end(), std::size_t(1), std::multiplies<>())
                                    : 0;
  }
  std::size_t bytes() const { return size() * sizeof(T); }
  const Device& device() const { return *device_; }
  bool on_host() const { return device_->kind == DeviceKind::cpu; }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  void zero() { device_->zero(data(), bytes()); }

  std::vector<T> to_host() const {
    std::vector<T> out(size());
    device_->copy_to_host(out.data(), data(), bytes());
    return out;
  }
  TensorOf to(DeviceKind where) const { return from_host(to_host(), shape_, where); }
  TensorOf clone() const {
    TensorOf t(shape_, device_->kind);
    device_->copy(t.data(), data(), bytes());
    return t;
  }

  // Host tensors only: element access as a range.
  T* begin() { return host_data(); }
  T* end() { return host_data() + size(); }
  const T* begin() const { return const_cast<TensorOf*>(this)->host_data(); }
  const T* end() const { return begin() + size(); }
  T& operator[](std::size_t i) { return host_data()[i]; }
  const T& operator[](std::size_t i) const { return begin()[i]; }
  operator std::span<T>() { return {begin(), size()}; }
  operator std::span<const T>() const { return {begin(), size()}; }

 private:
  T* host_data() {
    if (!on_host()) throw std::logic_error(std::string("tensor: element access to ") + device_->name + " memory");
    return data();
  }
  std::vector<std::size_t> shape_;
  const Device* device_ = &labkit::device(DeviceKind::cpu);
  std::shared_ptr<T> data_;
};

using Tensor = TensorOf<float>;
using IndexTensor = TensorOf<int>;

// A tensor's elements as a View, for the collectives and the optimizers: on its device.
template <class T> View view_of(TensorOf<T>& t) { return {t.data(), t.size(), dtype_of<T>()}; }

}  // namespace labkit
