// The ranks laid out as a device mesh (parallel/mesh.h; tp innermost, as
// Megatron-LM places it: Narayanan et al. 2021): each rank's node and
// coordinates, and each dimension's groups.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "collectives_lab.h"
#include "labkit/error.h"
#include "labkit/parallel/mesh_map.h"

namespace collectives_lab {

using namespace labkit;

// Rank 0 prints the map after every rank has checked that an all_reduce in each
// of its groups sums exactly the ranks the map lists (the groups are what split
// built on this backend).
void show_mesh(Comm& world, const std::vector<MeshDim>& dims, nlohmann::json& report, const std::string& plot) {
  const Mesh mesh(world, dims);
  for (const MeshDim& d : dims) {
    // The group's ranks are not kept across the all_reduce: every rank waits in
    // it at once, and 65536 ranks' lists of 65536 would not fit.
    std::int64_t expected = 0;
    for (int r : mesh.group_ranks(d.name, world.rank())) expected += r;
    std::vector<std::int64_t> sum = {world.rank()};
    mesh.group(d.name).all_reduce(view_of(sum), ReduceOp::sum);
    if (sum[0] != expected)
      throw Error(fmt::format("rank {}: mesh: its {} group [{}] summed to {}", world.rank(), d.name,
                              fmt::join(mesh.group_ranks(d.name, world.rank()), " "), sum[0]));
  }
  if (world.rank() != 0) return;
  fmt::print("{}checked: an all_reduce in each group sums exactly its ranks, on every rank\n", mesh_table(mesh));
  report = mesh_json(mesh);
  if (!plot.empty()) plot_mesh(mesh, plot);
}

}  // namespace collectives_lab
