#include "labkit/parallel/mesh_map.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "labkit/output.h"

namespace labkit {

namespace {

std::string shape_of(const Mesh& mesh) {
  std::vector<std::string> parts;
  for (const MeshDim& d : mesh.dims()) parts.push_back(fmt::format("{}={}", d.name, d.size));
  return fmt::format("{}", fmt::join(parts, " x "));
}

// Each group along `dim` once, in the order of its first rank.
std::vector<std::vector<int>> groups_along(const Mesh& mesh, const std::string& dim) {
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < mesh.world().size(); ++r) {
    std::vector<int> g = mesh.group_ranks(dim, r);
    if (g.front() == r) groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace

std::string mesh_table(const Mesh& mesh) {
  const Comm& world = mesh.world();
  std::string out = fmt::format("mesh {} over {} ranks ({} varies fastest)\n", shape_of(mesh), world.size(),
                                mesh.dims().back().name);
  out += "rank  node";
  for (const MeshDim& d : mesh.dims()) out += fmt::format("  {:>{}}", d.name, std::max<std::size_t>(2, d.name.size()));
  out += "\n";
  for (int r = 0; r < world.size(); ++r) {
    out += fmt::format("{:>4}  {:>4}", r, world.node_of(r));
    const MeshCoord c = mesh.coord(r);
    for (const auto& [name, index] : c.indices())
      out += fmt::format("  {:>{}}", index, std::max<std::size_t>(2, name.size()));
    out += "\n";
  }
  for (const MeshDim& d : mesh.dims()) {
    out += fmt::format("{} groups:", d.name);
    for (const std::vector<int>& g : groups_along(mesh, d.name)) out += fmt::format(" [{}]", fmt::join(g, " "));
    out += "\n";
  }
  return out;
}

nlohmann::json mesh_json(const Mesh& mesh) {
  nlohmann::json dims = nlohmann::json::array(), ranks = nlohmann::json::array(), groups = nlohmann::json::object();
  for (const MeshDim& d : mesh.dims()) {
    dims.push_back({{"name", d.name}, {"size", d.size}});
    groups[d.name] = groups_along(mesh, d.name);
  }
  for (int r = 0; r < mesh.world().size(); ++r) {
    nlohmann::json row = {{"rank", r}, {"node", mesh.world().node_of(r)}};
    const MeshCoord c = mesh.coord(r);
    for (const auto& [name, index] : c.indices()) row[name] = index;
    ranks.push_back(std::move(row));
  }
  return {{"dims", dims}, {"ranks", ranks}, {"groups", groups}};
}

void plot_mesh(const Mesh& mesh, const std::string& path) {
  static const char* const kColors[] = {"#8dd3c7", "#fdb462", "#bebada", "#fb8072",
                                        "#80b1d3", "#b3de69", "#fccde5", "#d9d9d9"};
  const Comm& world = mesh.world();
  const MeshDim& colored_by = mesh.dims().front();
  // Column of each rank: its place among its node's ranks (rows are nodes, top down).
  std::map<int, int> on_node;
  int columns = 1, nodes = 0;
  std::string objects;
  for (int r = 0; r < world.size(); ++r) {
    const int node = world.node_of(r), column = on_node[node]++;
    columns = std::max(columns, column + 1);
    nodes = std::max(nodes, node + 1);
    const MeshCoord c = mesh.coord(r);
    std::vector<std::string> coords;
    for (const auto& [name, index] : c.indices()) coords.push_back(fmt::format("{}={}", name, index));
    objects += fmt::format(
        "set object rect from {x0},{y0} to {x1},{y1} fc rgb '{color}' fillstyle solid border lc rgb '#404040'\n"
        "set label \"rank {rank}\\n{coords}\" at {x},{y} center front\n",
        fmt::arg("x0", column + 0.05), fmt::arg("y0", -node - 0.4), fmt::arg("x1", column + 0.95),
        fmt::arg("y1", -node + 0.4), fmt::arg("color", kColors[c[colored_by.name] % std::size(kColors)]),
        fmt::arg("rank", r), fmt::arg("coords", fmt::join(coords, " ")), fmt::arg("x", column + 0.5),
        fmt::arg("y", -node));
  }
  for (int node = 0; node < nodes; ++node)
    objects += fmt::format(
        "set object rect from 0,{y0} to {columns},{y1} fillstyle empty border lc rgb '#000000' lw 2 dashtype 2 back\n"
        "set label 'node {node}' at -0.1,{y} right\n",
        fmt::arg("y0", -node - 0.47), fmt::arg("y1", -node + 0.47), fmt::arg("columns", columns), fmt::arg("node", node),
        fmt::arg("y", -node));
  std::string key;  // one entry per color, as empty plots with a title
  for (int i = 0; i < std::min<int>(colored_by.size, std::size(kColors)); ++i)
    key += fmt::format("{}NaN with boxes fillstyle solid fc rgb '{}' title '{}={}'", i ? ", " : "", kColors[i],
                       colored_by.name, i);
  const std::string script = fmt::format(
      "set terminal {terminal} size {width},{height} font 'sans,10'\n"
      "set output '{path}'\n"
      "set title 'mesh {shape} over {ranks} ranks: a row per node, colored by {dim}'\n"
      "unset border\nunset tics\nset key outside bottom center horizontal\n"
      "set xrange [-0.8:{columns}]\nset yrange [{bottom}:0.6]\n"
      "{objects}"
      "plot {key}\n",
      fmt::arg("terminal", gnuplot_terminal(path)), fmt::arg("width", 150 * columns + 120),
      fmt::arg("height", 90 * nodes + 110), fmt::arg("path", path), fmt::arg("shape", shape_of(mesh)),
      fmt::arg("ranks", world.size()), fmt::arg("dim", colored_by.name), fmt::arg("columns", columns + 0.1),
      fmt::arg("bottom", -nodes + 0.4), fmt::arg("objects", objects), fmt::arg("key", key));
  run_gnuplot(script, path);
}

}  // namespace labkit
