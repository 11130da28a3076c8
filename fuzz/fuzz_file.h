// The loaders read files: a fuzz input goes to one, a file per process, rewritten
// for every input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace labkit::fuzz {

inline std::string write_input(const char* what, const std::uint8_t* data, std::size_t size) {
  static const std::string path = (std::filesystem::temp_directory_path() /
                                   ("labkit-fuzz-" + std::string(what) + "-" + std::to_string(getpid()) + ".json"))
                                      .string();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  return path;
}

}  // namespace labkit::fuzz
