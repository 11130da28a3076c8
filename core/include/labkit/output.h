// What labs write to disk: JSON beside every table, figures drawn by gnuplot.
#pragma once

#include <fstream>
#include <string>
#include <string_view>

namespace labkit {

// Opens `path` for writing, creating its folders; throws naming the path if it cannot.
std::ofstream create_file(const std::string& path);

// gnuplot's terminal for a figure file: pngcairo for .png, svg for anything else.
std::string_view gnuplot_terminal(const std::string& path);

// Runs gnuplot on `script` (which names its own output); throws if it fails.
void run_gnuplot(const std::string& script);

}  // namespace labkit
