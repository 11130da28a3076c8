// The compute lab's views, one file each: budget.cpp (C = 6ND and GPU-hours),
// roofline.cpp (this machine's roofs and the tiny GPT's ops against them),
// ccr.cpp (the communication roofline of data parallelism).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "labkit/compute.h"
#include "labkit/device.h"

namespace compute_lab {

nlohmann::json print_budget(const labkit::compute::Accelerator& gpu, double mfu);
nlohmann::json print_ccr();
// batch 0: 65,536 tokens' worth of the model's context.
nlohmann::json print_roofline(labkit::DeviceKind where, const std::string& model, int batch, const std::string& plot);

// 1234567 as "1,234,567": the course readings print their figures so.
std::string grouped(double value);

}  // namespace compute_lab
