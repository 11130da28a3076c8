// The rank-to-coordinates map of a Mesh, as a table, as JSON and as a picture:
// what Megatron logs at start-up ("all tensor model parallel group ranks:
// [[0, 1], [2, 3], ...]") with each rank's node beside its coordinates.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "labkit/parallel/mesh.h"

namespace labkit {

// A row per rank (rank, node, one column per dimension), then each dimension's groups:
//
//   rank  node  pp  dp  tp
//      0     0   0   0   0
//      1     0   0   0   1
//   ...
//   tp groups: [0 1] [2 3] [4 5] [6 7]
std::string mesh_table(const Mesh& mesh);

// The same as {"dims": [{"name", "size"}...], "ranks": [{"rank", "node", "pp", ...}...],
// "groups": {"pp": [[0, 4], ...], ...}}.
nlohmann::json mesh_json(const Mesh& mesh);

// Draws the ranks as boxes in a row per node, each labelled with its coordinates
// and colored by its index along the first (outermost) dimension; SVG, or PNG
// for a .png path (gnuplot).
void plot_mesh(const Mesh& mesh, const std::string& path);

}  // namespace labkit
