#include "labkit/lab/main.h"

#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "labkit/cli.h"
#include "labkit/output.h"
#include "labkit/run.h"

namespace labkit::lab {

namespace {

void say_whose_code() {
  const Code& code = this_executables_code;
  if (*code.exercises == '\0') return;
  if (code.yours)
    fmt::print("code: yours (exercises/; this lab's: {})\n", code.exercises);
  else
    fmt::print("code: reference (./labkit mine {} runs yours)\n", code.lab);
  std::fflush(stdout);
}

}  // namespace

int run_main(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  cli::one_line_errors(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    const int status = body();
    if (status == 0 && !this_process_is_quiet()) check_run_options_took_effect(app);  // under mpirun, rank 0's
    say_whose_code();
    return status;
  } catch (const std::exception& e) {
    // Under mpirun every process checks the same options and fails alike: rank 0
    // says it (a rank that fails alone inside the run says it there, backends/mpi).
    if (this_process_is_quiet()) return 1;
    std::fflush(stdout);  // the rows printed before it, then the error
    fmt::print(stderr, "error: {}\n", e.what());
    if (this_executables_code.yours) say_whose_code();
    return 1;
  }
}

}  // namespace labkit::lab
