// labkit::lab::plot — a lab's --plot: its figure drawn by gnuplot from the
// numbers it printed, handed over in the script as a datablock (no file to
// write and remove beside the figure).
//
//   std::string data;                                      // a line per point: x y1 y2
//   for (const Row& r : rows) data += fmt::format("{} {} {}\n", r.step, r.plain, r.compressed);
//   lab::plot(o.plot, {.width = 800, .height = 500}, data,
//             "set xlabel 'step'\nplot $data using 1:2 title 'none', '' using 1:3 title 'bf16'\n");
#pragma once

#include <string>
#include <string_view>

namespace labkit::lab {

// The figure's size and its font's, on a white background.
struct Figure {
  int width = 800, height = 500;  // pixels
  int font = 10;                  // points
};

// Draws `path` (an SVG, or a PNG where it ends in .png) with gnuplot: its
// terminal and output, text as written (no enhanced-text markup, so a '_' in
// a name prints as itself), `data` as the datablock $data (gnuplot's data: a
// line of columns per point, two blank lines between the blocks that `index`
// picks), then `commands`. Throws where gnuplot cannot start or fails.
void plot(const std::string& path, const Figure& figure, std::string_view data, std::string_view commands);

}  // namespace labkit::lab
