#include "labkit/lab/plot.h"

#include <fmt/format.h>

#include "labkit/output.h"

namespace labkit::lab {

void plot(const std::string& path, const Figure& figure, std::string_view data, std::string_view commands) {
  run_gnuplot(fmt::format("set terminal {} size {},{} font 'sans,{}' background '#ffffff'\nset output '{}'\n"
                          "set termoption noenhanced\n$data << EOD\n{}EOD\n{}",
                          gnuplot_terminal(path), figure.width, figure.height, figure.font, path, data, commands),
              path);
}

}  // namespace labkit::lab
