// cuBLAS, opened at the first matmul on a GPU rather than linked. A linked
// libcublas brings libcublasLt, whose initializers run at every process's
// start, GPU or none: a third of a second on the 2-core machine the book is
// built on, paid by every lab command on the CPU and by every process CTest
// starts. labkit calls three of its functions; they are looked up by name, as
// the library exports them (cublas_v2.h maps cublasSgemm to cublasSgemm_v2).
#include <dlfcn.h>

#include <fmt/format.h>

#include "cuda_support.h"
#include "labkit/ops_cuda.h"

namespace labkit::cuda_launch {

const Cublas& cublas() {
  static const Cublas library = [] {
    // The toolkit's copy this build was made with, else wherever the loader finds the soname.
    void* so = dlopen(LABKIT_CUBLAS_DIR "/" LABKIT_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!so) so = dlopen(LABKIT_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!so) throw std::runtime_error(fmt::format("cublas: cannot open {}: {}", LABKIT_CUBLAS_SONAME, dlerror()));
    const auto function = [&](const char* name) {
      void* f = dlsym(so, name);
      if (!f) throw std::runtime_error(fmt::format("cublas: {} has no {}", LABKIT_CUBLAS_SONAME, name));
      return f;
    };
    return Cublas{.create = reinterpret_cast<decltype(Cublas::create)>(function("cublasCreate_v2")),
                  .set_stream = reinterpret_cast<decltype(Cublas::set_stream)>(function("cublasSetStream_v2")),
                  .sgemm = reinterpret_cast<decltype(Cublas::sgemm)>(function("cublasSgemm_v2"))};
  }();
  return library;
}

}  // namespace labkit::cuda_launch

namespace labkit::ops::cuda {
void open_cublas() { cuda_launch::cublas(); }
}  // namespace labkit::ops::cuda
