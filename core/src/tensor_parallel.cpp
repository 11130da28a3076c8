#include "labkit/tensor_parallel.h"

#include <stdexcept>
#include <string>

namespace labkit {

namespace {
void check(std::size_t size, int OC, int C, int parts, int index, int split, const char* what) {
  if (size != std::size_t(OC) * C) throw std::invalid_argument(std::string(what) + ": weight is not OC x C");
  if (parts < 1 || index < 0 || index >= parts) throw std::invalid_argument(std::string(what) + ": index out of range");
  if (split % parts) throw std::invalid_argument(std::string(what) + ": " + std::to_string(split) + " does not divide by " + std::to_string(parts));
}
}  // namespace

std::vector<float> column_shard(std::span<const float> weight, int OC, int C, int parts, int index) {
  check(weight.size(), OC, C, parts, index, OC, "column_shard");
  const int rows = OC / parts;
  const auto first = weight.begin() + std::size_t(index) * rows * C;
  return {first, first + std::size_t(rows) * C};
}

std::vector<float> row_shard(std::span<const float> weight, int OC, int C, int parts, int index) {
  check(weight.size(), OC, C, parts, index, C, "row_shard");
  const int cols = C / parts;
  std::vector<float> shard;
  shard.reserve(std::size_t(OC) * cols);
  for (int o = 0; o < OC; ++o) {
    const auto row = weight.begin() + std::size_t(o) * C + std::size_t(index) * cols;
    shard.insert(shard.end(), row, row + cols);
  }
  return shard;
}

}  // namespace labkit
