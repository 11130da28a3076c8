// The visualizer's trace loader (visualizer/trace_model.cpp) on any bytes: a
// model, or labkit::Error naming the file and the fault; never a crash.
#include "fuzz_file.h"
#include "labkit/error.h"
#include "trace_model.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    viz::load_chrome_trace(labkit::fuzz::write_input("trace", data, size));
  } catch (const labkit::Error&) {
  }
  return 0;
}
