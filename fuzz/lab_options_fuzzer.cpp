// A lab's command line, fuzzed: each line of the input is one argument. The
// lab's own main (compiled as labkit_lab_main) parses and checks them, and
// stops where its ranks would start (labkit::before_ranks_start); a lab that
// starts none (memory) runs whole. Quiet: no output, no files, no gnuplot.
// Bad options must end in an error message, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "labkit/output.h"
#include "labkit/run.h"

int labkit_lab_main(int argc, char** argv);

namespace {
struct RanksWouldStart {};  // not a std::exception: the lab's handlers let it through
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  labkit::quiet_this_process();
  labkit::before_ranks_start = [](const labkit::RunOptions&) { throw RanksWouldStart{}; };
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args = {"lab"};
  std::string arg;
  for (std::size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == '\n') {
      if (i < size || !arg.empty()) args.push_back(arg);
      arg.clear();
    } else {
      arg += char(data[i]);
    }
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  try {
    labkit_lab_main(int(args.size()), argv.data());
  } catch (const RanksWouldStart&) {
  }
  return 0;
}
