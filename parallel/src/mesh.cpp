#include "labkit/parallel/mesh.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "labkit/error.h"

namespace labkit {

namespace {

std::string names_of(const std::vector<std::string>& names) { return fmt::format("{}", fmt::join(names, ", ")); }

std::string shape_of(const std::vector<MeshDim>& dims) {
  std::vector<std::string> parts;
  for (const MeshDim& d : dims) parts.push_back(fmt::format("{}={}", d.name, d.size));
  return fmt::format("{}", fmt::join(parts, " x "));
}

}  // namespace

std::vector<MeshDim> parse_mesh_dims(std::string_view text) {
  constexpr std::int64_t kMostRanks = 1 << 20;  // --ranks' limit
  std::vector<MeshDim> dims;
  std::int64_t ranks = 1;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string_view part = text.substr(start, end - start);
    const std::size_t eq = part.find('=');
    MeshDim dim{std::string(part.substr(0, eq)), 0};
    const std::string_view size = eq == std::string_view::npos ? "" : part.substr(eq + 1);
    const auto [used, error] = std::from_chars(size.data(), size.data() + size.size(), dim.size);
    if (dim.name.empty() || size.empty() || error != std::errc() || used != size.data() + size.size() || dim.size < 1)
      throw Error(fmt::format("'{}' is not NAME=SIZE,... with sizes of 1 or more (e.g. pp=2,dp=2,tp=2)", text));
    ranks *= dim.size;
    if (ranks > kMostRanks) throw Error(fmt::format("'{}' makes more than {} ranks", text, kMostRanks));
    dims.push_back(std::move(dim));
    start = end + 1;
  }
  return dims;
}

int MeshCoord::operator[](std::string_view dim) const {
  std::vector<std::string> known;
  for (const auto& [name, index] : indices_) {
    if (name == dim) return index;
    known.push_back(name);
  }
  fail(fmt::format("rank {}", rank_), "mesh coord", "no dimension '{}' (the mesh has {})", dim, names_of(known));
}

Mesh::Mesh(Comm& world, std::vector<MeshDim> dims) : world_(&world), dims_(std::move(dims)) {
  const std::string who = fmt::format("rank {}", world.rank());
  if (dims_.empty()) fail(who, "mesh", "no dimensions: name at least one, e.g. {{\"dp\", {}}}", world.size());
  double ranks = 1;  // a double cannot overflow; exact for any count that could match
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    const MeshDim& dim = dims_[d];
    if (dim.name.empty()) fail(who, "mesh", "dimension {} has no name", d);
    if (dim.size < 1) fail(who, "mesh", "{}={}: a dimension's size must be at least 1", dim.name, dim.size);
    for (std::size_t e = 0; e < d; ++e)
      if (dims_[e].name == dim.name) fail(who, "mesh", "dimension '{}' is named twice", dim.name);
    ranks *= dim.size;
  }
  if (ranks != world.size())
    fail(who, "mesh", "{} makes {:g} ranks but the group has {}: the sizes must multiply to the number of ranks",
         shape_of(dims_), ranks, world.size());
  // One split per dimension, in the same order on every rank. Ranks that agree on
  // every other coordinate share a color; the key orders them along this one.
  const MeshCoord me = coord();
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    const int along = me.indices_[d].second;
    const int color = world.rank() - along * stride(d);  // the group's first rank
    groups_.push_back(world.split(color, along));
  }
}

std::size_t Mesh::index_of(std::string_view dim) const {
  std::vector<std::string> known;
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    if (dims_[d].name == dim) return d;
    known.push_back(dims_[d].name);
  }
  fail(fmt::format("rank {}", world_->rank()), "mesh", "no dimension '{}' (the mesh has {})", dim, names_of(known));
}

int Mesh::stride(std::size_t d) const {
  int s = 1;
  for (std::size_t e = d + 1; e < dims_.size(); ++e) s *= dims_[e].size;
  return s;
}

MeshCoord Mesh::coord(int rank) const {
  if (rank < 0 || rank >= world_->size())
    fail(fmt::format("rank {}", world_->rank()), "mesh coord", "rank={} is out of range for {} ranks", rank,
         world_->size());
  MeshCoord c;
  c.rank_ = rank;
  for (std::size_t d = 0; d < dims_.size(); ++d) c.indices_.emplace_back(dims_[d].name, rank / stride(d) % dims_[d].size);
  return c;
}

int Mesh::rank_of(const MeshCoord& coord) const {
  int rank = 0;
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    const int index = coord[dims_[d].name];
    if (index < 0 || index >= dims_[d].size)
      fail(fmt::format("rank {}", world_->rank()), "mesh rank_of", "{}={} is out of range for size {}", dims_[d].name,
           index, dims_[d].size);
    rank += index * stride(d);
  }
  return rank;
}

std::vector<int> Mesh::group_ranks(std::string_view dim, int rank) const {
  const std::size_t d = index_of(dim);
  const int first = rank - coord(rank).indices_[d].second * stride(d);
  std::vector<int> ranks;
  for (int i = 0; i < dims_[d].size; ++i) ranks.push_back(first + i * stride(d));
  return ranks;
}

}  // namespace labkit
