// What labs write to disk: JSON beside every table, figures drawn by gnuplot.
#pragma once

#include <fstream>
#include <string>
#include <string_view>

namespace labkit {

// Opens `path` for writing, creating its folders; throws naming the path if it cannot.
// In a quiet process, a stream to nowhere.
std::ofstream create_file(const std::string& path);
// Flushes what was written to `out`, the file at `path`, and throws naming it if
// any of it did not reach the disk (full, or the file gone).
void finish_file(std::ofstream& out, const std::string& path);

// The file one row of a table writes, where a lab runs once per row and each
// run has a file of its own (--trace): the row's name before the first
// extension, out/ddp.trace.json and "overlap" giving out/ddp.overlap.trace.json.
std::string row_file(const std::string& path, std::string_view row);

// Under mpirun every process runs the whole lab, and one of them, rank 0, speaks
// for it: the launcher quiets the others' standard output and files, so a lab
// prints and writes once, as on the simulator.
void quiet_this_process();
bool this_process_is_quiet();

// A progress line on standard error where it is a terminal (or, under ./labkit
// mpi, mpirun's is), rewritten in place; "" clears it. Nothing where standard
// error is a file or a pipe (CI, the book's tests), so that what a command
// prints is the same there, nor in a quieted process of mpirun.
void progress_line(const std::string& what);

// gnuplot's terminal for a figure file: pngcairo for .png, svg for anything else.
std::string_view gnuplot_terminal(const std::string& path);

// Runs gnuplot on `script`, which draws the figure `path`, and says "wrote
// PATH"; throws if it fails.
void run_gnuplot(const std::string& script, const std::string& path);

}  // namespace labkit
