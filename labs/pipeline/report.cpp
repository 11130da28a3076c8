// What the views' tables share (pipeline.h): their columns, and a table's JSON
// without what it prints for the reader alone.
#include <fmt/format.h>

#include "pipeline.h"

namespace pipeline_lab {

std::vector<lab::Column> step_columns(const std::string& backward_key, const std::string& weights_key) {
  return {{.header = "schedule", .key = "schedule", .width = 12, .align = lab::Align::left},
          {.header = "P", .key = "stages", .width = 3},
          {.header = "M", .key = "microbatches", .width = 4},
          {.header = "V", .key = "virtual_stages", .width = 3},
          {.header = "forward", .key = "forward", .width = 9},
          {.header = "backward", .key = backward_key, .width = 9},
          {.header = "weights", .key = weights_key, .width = 9},
          {.header = "step", .key = "t_step", .width = 9},
          {.header = "bubble", .key = "bubble", .width = 7},
          {.header = "formula", .key = "formula", .width = 8},
          {.header = "played", .key = "played", .width = 7}};
}

}  // namespace pipeline_lab
