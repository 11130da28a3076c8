// The topology loader (--topology FILE.json, core/src/topology.cpp) on any bytes:
// a topology, or std::invalid_argument saying what is wrong; never a crash.
#include <stdexcept>

#include "fuzz_file.h"
#include "labkit/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const labkit::Topology t = labkit::find_topology(labkit::fuzz::write_input("topology", data, size));
    if (t.devices_per_node < 1 || t.nics_per_node < 1) __builtin_trap();  // what load() promises
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
