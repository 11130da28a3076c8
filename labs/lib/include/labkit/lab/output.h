// What a lab writes beside what it prints.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace labkit::lab {

// Writes `value` as JSON to `path` (--json), once under mpirun (output.h's quiet
// processes write nowhere); nothing where `path` is empty. Throws naming the
// path where the write fails, a full disk included.
void write_json(const std::string& path, const nlohmann::json& value);

}  // namespace labkit::lab
