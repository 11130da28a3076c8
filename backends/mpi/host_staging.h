// A buffer as MPI needs it, in host memory: the caller's own where it is there
// already, else a host copy of a device's buffer (a GPU's, the fenced
// device's), copied in on construction and back by copy_out() once MPI is done
// with it. Open MPI as Debian builds it has no CUDA support: handed device
// memory it reads it as host memory, which on a GPU crashes and on the fenced
// device stops the run. So the MPI backend stages, as the NCCL backend stages
// host buffers the other way (nccl_comm.cpp's OnDevice); the trace and the
// lab's counts see the bytes the lab sent, the copies are the backend's.
#pragma once

#include <memory>

#include "labkit/device.h"
#include "labkit/view.h"

namespace labkit::mpi {

class HostStaging {
 public:
  HostStaging() = default;
  // `in`: MPI reads the buffer (a send, a collective's input, an in-place result).
  HostStaging(View v, bool in) : user_(v), data_(v.data) {
    if (!v.data || !v.bytes()) return;
    const Device& where = device_of(v.data);
    if (where.kind == DeviceKind::cpu) return;
    device_ = &where;
    host_ = std::make_unique<std::byte[]>(v.bytes());
    data_ = host_.get();
    if (in) where.copy_to_host(data_, v.data, v.bytes());
  }
  void* data() const { return data_; }
  // After MPI wrote into it: the bytes to the device buffer, once (a test
  // that saw it done and the wait after it do not copy twice).
  void copy_out() {
    if (host_) device_->copy_from_host(user_.data, host_.get(), user_.bytes());
    host_.reset();
  }

 private:
  View user_;
  void* data_ = nullptr;
  const Device* device_ = nullptr;
  std::unique_ptr<std::byte[]> host_;
};

}  // namespace labkit::mpi
