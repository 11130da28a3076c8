#include "labkit/lab/main.h"

#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "labkit/cli.h"

namespace labkit::lab {

int run_main(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  cli::one_line_errors(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return body();
  } catch (const std::exception& e) {
    std::fflush(stdout);  // the rows printed before it, then the error
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}

}  // namespace labkit::lab
