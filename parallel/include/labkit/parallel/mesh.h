// labkit::Mesh — the ranks laid out as an N-dimensional grid, one process group
// per dimension (PyTorch's DeviceMesh, Megatron's parallel_state).
//
//   Mesh mesh(world, {{"pp", 2}, {"dp", 2}, {"tp", 2}});   // 8 ranks
//
//   rank = (pp * 2 + dp) * 2 + tp        the last dimension varies fastest
//
//   rank  0 1 2 3 4 5 6 7
//   pp    0 0 0 0 1 1 1 1     pp groups [0 4] [1 5] [2 6] [3 7]
//   dp    0 0 1 1 0 0 1 1     dp groups [0 2] [1 3] [4 6] [5 7]
//   tp    0 1 0 1 0 1 0 1     tp groups [0 1] [2 3] [4 5] [6 7]
//
// Listing tp last gives Megatron's placement (initialize_model_parallel, whose
// order string "tp-cp-ep-dp-pp" reads innermost first): tensor parallelism, which
// talks at every layer, sits on neighbouring ranks, and so inside one node's
// NVLink; pipeline stages, which pass one activation per micro-batch, span nodes.
//
// A rank's group along a dimension holds the ranks that share every other
// coordinate, ordered by their coordinate along it: mesh.group("tp").rank() is
// this rank's tp coordinate. The groups are split once, when the mesh is built,
// and freed with it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "labkit/comm.h"

namespace labkit {

struct MeshDim {
  std::string name;  // "pp", "dp", "tp", ...
  int size;
};

// Where a rank sits in the mesh: its index along each dimension, outermost first.
class MeshCoord {
 public:
  int operator[](std::string_view dim) const;  // mesh.coord(5)["tp"] == 1
  int rank() const { return rank_; }
  const std::vector<std::pair<std::string, int>>& indices() const { return indices_; }
  bool operator==(const MeshCoord&) const = default;

 private:
  friend class Mesh;
  int rank_ = -1;
  std::vector<std::pair<std::string, int>> indices_;  // {"pp", 1}, {"dp", 0}, {"tp", 1}
};

// A mesh's shape as a lab's --mesh takes it: "pp=2,dp=2,tp=2", outermost first.
std::vector<MeshDim> parse_mesh_dims(std::string_view text);

class Mesh {
 public:
  // Every rank of `world` builds the mesh together (it splits `world` once per
  // dimension, in the order given); the sizes must multiply to world.size().
  Mesh(Comm& world, std::vector<MeshDim> dims);

  Comm& world() const { return *world_; }
  const std::vector<MeshDim>& dims() const { return dims_; }
  int size(std::string_view dim) const { return dims_[index_of(dim)].size; }
  // This rank's group along `dim`: the ranks that differ from it only there.
  Comm& group(std::string_view dim) const { return *groups_[index_of(dim)]; }
  // The coordinates of a rank of `world` (this rank's without an argument), and back.
  MeshCoord coord(int rank) const;
  MeshCoord coord() const { return coord(world_->rank()); }
  int rank_of(const MeshCoord& coord) const;
  // The ranks of `world` in rank's group along `dim`, in group order.
  std::vector<int> group_ranks(std::string_view dim, int rank) const;

 private:
  std::size_t index_of(std::string_view dim) const;  // throws, listing the known dimensions
  int stride(std::size_t d) const;                   // ranks between neighbours along dimension d

  Comm* world_;
  std::vector<MeshDim> dims_;
  std::vector<std::unique_ptr<Comm>> groups_;  // one per dimension
};

}  // namespace labkit
