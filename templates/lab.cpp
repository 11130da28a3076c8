// The template for a new lab (book/95-adding-a-lab.md): copy it to labs/NAME.cpp
// (or into labs/NAME/ for a lab with several views), then register the lab
// with one call in labs/CMakeLists.txt:
//
//   labkit_lab(NAME EXERCISES your_function TOUR "--ranks 4")
//
// CTest builds and runs this file as it stands (lab.template.runs), so it
// keeps up with the kit. A lab opens as this one does: what it shows, the
// command line, and what it prints.
//
// Lab template: every rank adds its rank number to a sum with allreduce.
//
//   ./labkit lab NAME --ranks 4 --count 3
//
//   rank 0 at 10.2 us: [6 6 6] (expected 6, the sum 0 + 1 + ... + 3)
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "labkit/cli.h"
#include "labkit/lab/main.h"
#include "labkit/run.h"
#include "labkit/units.h"

using namespace labkit;

namespace {

struct Options {
  int count = 3;  // elements per rank
};

// The rank function comes first: every rank runs it (SPMD), on every backend.
// The lesson lives here; main() only reads the options and hands it to run().
void each_rank(Comm& comm, const Options& o) {
  const int p = comm.size();
  std::vector<float> values(o.count, float(comm.rank()));
  comm.all_reduce(view_of(values), ReduceOp::sum);  // --algo all_reduce=ring runs a labkit algorithm
  if (comm.rank() == 0)
    fmt::print("rank 0 at {}: [{}] (expected {}, the sum 0 + 1 + ... + {})\n", format_seconds(comm.now()),
               fmt::join(values, " "), p * (p - 1) / 2, p - 1);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab template: every rank adds its rank number to a sum with allreduce"};
  Options o;
  RunOptions run_options;
  app.add_option("--count", o.count, "elements per rank")->capture_default_str()->check(cli::at_least(1));
  add_run_options(app, run_options);
  return lab::run_main(app, argc, argv, [&] {
    run(run_options, [&](Comm& comm) { each_rank(comm, o); });
    return 0;
  });
}
