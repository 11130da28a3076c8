// Lab 3's views, one file each: breakdown.cpp (the table per GPU, the timeline,
// the recommendation), sweep.cpp (ZeRO stages or GPU counts side by side).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "labkit/memory.h"

namespace memory_lab {

using labkit::memory::Architecture;
using labkit::memory::Gpu;
using labkit::memory::Plan;

int list_models();
nlohmann::json print_breakdown(const Architecture& model, const Plan& plan, const Gpu& gpu);
nlohmann::json print_timeline(const Architecture& model, const Plan& plan);
nlohmann::json print_recommendation(const Architecture& model, const Plan& plan, const Gpu& gpu, int gpus,
                                    int per_node);
nlohmann::json print_sweep(const Architecture& model, const Plan& plan, const Gpu& gpu, const std::string& what,
                           const std::string& plot);

}  // namespace memory_lab
