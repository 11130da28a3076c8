// This build has no CUDA: asking for the GPU says so.
#include <stdexcept>

#include "labkit/device.h"

namespace labkit {

const Device& cuda_device() {
  throw std::runtime_error("cuda: this build of labkit has no CUDA (nvcc was not found when it was configured)");
}
bool cuda_available() { return false; }

}  // namespace labkit
