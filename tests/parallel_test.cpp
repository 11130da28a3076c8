// parallel/: the device mesh (groups, Megatron's order, coordinates, errors,
// the printed map) and the lifetime of process groups on the simulator.
#include <numeric>
#include <regex>

#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/algorithms.h"
#include "labkit/error.h"
#include "labkit/parallel/mesh.h"
#include "labkit/parallel/mesh_map.h"

using namespace labkit;
using labkit::test::error_of;
using labkit::test::simulate;

namespace {

int ranks_of(const std::vector<MeshDim>& dims) {
  int n = 1;
  for (const MeshDim& d : dims) n *= d.size;
  return n;
}

bool matches(const std::string& text, const char* pattern) { return std::regex_match(text, std::regex(pattern)); }

const std::vector<std::vector<MeshDim>> kShapes = {
    {{"dp", 1}},
    {{"dp", 4}},
    {{"dp", 3}, {"tp", 2}},
    {{"pp", 2}, {"dp", 2}, {"tp", 2}},
    {{"pp", 2}, {"dp", 1}, {"tp", 4}},
    {{"pp", 3}, {"dp", 2}, {"cp", 1}, {"tp", 2}},
    {{"dp", 2}, {"ep", 3}, {"tp", 2}},
};

}  // namespace

TEST(Mesh, EachGroupHoldsTheRanksThatDifferOnlyAlongItsDimension) {
  for (const auto& dims : kShapes) {
    simulate(ranks_of(dims), [&](Comm& world) {
      const Mesh mesh(world, dims);
      const MeshCoord me = mesh.coord();
      for (const MeshDim& d : dims) {
        Comm& g = mesh.group(d.name);
        ASSERT_EQ(g.size(), d.size) << "rank " << world.rank() << ", " << d.name;
        EXPECT_EQ(g.rank(), me[d.name]) << "rank " << world.rank() << ": its group rank is its coordinate along " << d.name;
        for (int i = 0; i < g.size(); ++i) {
          const MeshCoord other = mesh.coord(g.global_rank(i));
          EXPECT_EQ(other[d.name], i) << "rank " << world.rank() << ", " << d.name << " group member " << i;
          for (const auto& [name, index] : other.indices()) {
            if (name == d.name) continue;
            EXPECT_EQ(index, me[name]) << "rank " << world.rank() << ", " << d.name << " group";
          }
          EXPECT_EQ(g.global_rank(i), mesh.group_ranks(d.name, world.rank())[i]);
        }
      }
    });
  }
}

TEST(Mesh, TheLastDimensionVariesFastestAsMegatronPlacesTp) {
  simulate(8, [](Comm& world) {
    const Mesh mesh(world, {{"pp", 2}, {"dp", 2}, {"tp", 2}});
    EXPECT_EQ(mesh.group_ranks("tp", 0), (std::vector<int>{0, 1}));
    EXPECT_EQ(mesh.group_ranks("dp", 0), (std::vector<int>{0, 2}));
    EXPECT_EQ(mesh.group_ranks("pp", 0), (std::vector<int>{0, 4}));
    EXPECT_EQ(mesh.group_ranks("dp", 5), (std::vector<int>{5, 7}));
    const MeshCoord c = mesh.coord(5);  // 5 = (1 * 2 + 0) * 2 + 1
    EXPECT_EQ(c["pp"], 1);
    EXPECT_EQ(c["dp"], 0);
    EXPECT_EQ(c["tp"], 1);
    EXPECT_EQ(mesh.size("tp"), 2);
  });
}

TEST(Mesh, CoordinatesRoundTrip) {
  for (const auto& dims : kShapes) {
    simulate(ranks_of(dims), [&](Comm& world) {
      const Mesh mesh(world, dims);
      if (world.rank() != 0) return;
      for (int r = 0; r < world.size(); ++r) EXPECT_EQ(mesh.rank_of(mesh.coord(r)), r);
    });
  }
}

TEST(Mesh, AllReduceInATpGroupSumsOnlyItsMembers) {
  const std::size_t n = 5;
  simulate(8, [&](Comm& world) {
    const Mesh mesh(world, {{"pp", 2}, {"dp", 2}, {"tp", 2}});
    auto value = [](int rank, std::size_t i) { return float(rank * 100 + i); };
    std::vector<float> buf(n);
    for (std::size_t i = 0; i < n; ++i) buf[i] = value(world.rank(), i);
    mesh.group("tp").all_reduce(view_of(buf), ReduceOp::sum);
    for (std::size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int member : mesh.group_ranks("tp", world.rank())) want += value(member, i);
      EXPECT_EQ(buf[i], want) << "rank " << world.rank() << ", element " << i;
    }
  });
}

TEST(Mesh, BadShapesAreNamed) {
  EXPECT_EQ(error_of(8, [](Comm& w) { Mesh(w, {{"pp", 2}, {"dp", 3}}); }),
            "rank 0: mesh: pp=2 x dp=3 makes 6 ranks but the group has 8: the sizes must multiply to the number of ranks");
  EXPECT_EQ(error_of(4, [](Comm& w) { Mesh(w, {{"dp", 2}, {"dp", 2}}); }), "rank 0: mesh: dimension 'dp' is named twice");
  EXPECT_EQ(error_of(4, [](Comm& w) { Mesh(w, {{"dp", 0}, {"tp", 4}}); }),
            "rank 0: mesh: dp=0: a dimension's size must be at least 1");
  EXPECT_EQ(error_of(2, [](Comm& w) { Mesh(w, {}); }), "rank 0: mesh: no dimensions: name at least one, e.g. {\"dp\", 2}");
  // After the splits, every rank fails alike and the first to run on reports.
  EXPECT_PRED2(matches, error_of(4, [](Comm& w) { Mesh(w, {{"dp", 2}, {"tp", 2}}).group("ep"); }),
               "rank [0-3]: mesh: no dimension 'ep' \\(the mesh has dp, tp\\)");
  EXPECT_EQ(error_of(4, [](Comm& w) { (void)Mesh(w, {{"dp", 2}, {"tp", 2}}).coord(3)["pp"]; }),
            "rank 3: mesh coord: no dimension 'pp' (the mesh has dp, tp)");
  EXPECT_PRED2(matches, error_of(4, [](Comm& w) { (void)Mesh(w, {{"dp", 4}}).coord(4); }),
               "rank [0-3]: mesh coord: rank=4 is out of range for 4 ranks");
}

TEST(Mesh, ParsesALabsMeshOption) {
  const std::vector<MeshDim> dims = parse_mesh_dims("pp=2,dp=4,tp=8");
  ASSERT_EQ(dims.size(), 3u);
  EXPECT_EQ(dims[1].name, "dp");
  EXPECT_EQ(dims[1].size, 4);
  for (const char* bad : {"", "pp", "pp=", "pp=0", "=2", "pp=2,", "pp=2x", "pp=-1", "pp=99999999999"})
    EXPECT_THROW(parse_mesh_dims(bad), Error) << bad;
  EXPECT_THROW(parse_mesh_dims("a=1024,b=1024,c=2"), Error);  // more ranks than --ranks allows
}

TEST(MeshMap, PrintsEachRanksNodeAndCoordinatesThenTheGroups) {
  simulate(8, [](Comm& world) {
    const Mesh mesh(world, {{"pp", 2}, {"dp", 2}, {"tp", 2}});
    if (world.rank() != 0) return;
    EXPECT_EQ(mesh_table(mesh),
              "mesh pp=2 x dp=2 x tp=2 over 8 ranks (tp varies fastest)\n"
              "rank  node  pp  dp  tp\n"
              "   0     0   0   0   0\n"
              "   1     0   0   0   1\n"
              "   2     0   0   1   0\n"
              "   3     0   0   1   1\n"
              "   4     0   1   0   0\n"
              "   5     0   1   0   1\n"
              "   6     0   1   1   0\n"
              "   7     0   1   1   1\n"
              "pp groups: [0 4] [1 5] [2 6] [3 7]\n"
              "dp groups: [0 2] [1 3] [4 6] [5 7]\n"
              "tp groups: [0 1] [2 3] [4 5] [6 7]\n");
    const nlohmann::json j = mesh_json(mesh);
    EXPECT_EQ(j["ranks"][5], (nlohmann::json{{"rank", 5}, {"node", 0}, {"pp", 1}, {"dp", 0}, {"tp", 1}}));
    EXPECT_EQ(j["groups"]["dp"], (nlohmann::json{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
    EXPECT_EQ(j["dims"][2], (nlohmann::json{{"name", "tp"}, {"size", 2}}));
  });
}

TEST(MeshMap, NodesComeFromTheTopology) {
  simulate(16, [](Comm& world) {  // dgx-h100: 8 GPUs a node
    const Mesh mesh(world, {{"dp", 2}, {"tp", 8}});
    if (world.rank() != 0) return;
    const nlohmann::json j = mesh_json(mesh);
    for (int r = 0; r < 16; ++r) EXPECT_EQ(j["ranks"][r]["node"], r / 8) << "rank " << r;
  });
}

// ---- the lifetime of groups on the simulator ------------------------------------

namespace {
// Runs fn on the simulator with the engine at hand, to read its live groups. A
// rank reads them between two barriers: the last rank to reach a barrier runs on
// first, and would otherwise free groups before the others have counted.
void with_engine(int ranks, const std::function<void(Comm&, const sim::Engine&)>& fn) {
  sim::Engine engine({.ranks = ranks, .topology = find_topology("dgx-h100")});
  engine.run([&](Comm& c) { fn(c, engine); });
  EXPECT_EQ(engine.live_groups(), 1) << "every split group's record is dropped by the end: only the world is left";
}
}  // namespace

TEST(GroupLifetime, AMeshsGroupsAreFreedWithIt) {
  with_engine(8, [](Comm& world, const sim::Engine& engine) {
    {
      const Mesh mesh(world, {{"pp", 2}, {"dp", 2}, {"tp", 2}});
      world.barrier();  // every rank has built its mesh
      EXPECT_EQ(engine.live_groups(), 1 + 3 * 4) << "the world and 4 groups along each of pp, dp and tp";
      world.barrier();
    }
    world.barrier();  // every rank has destroyed its mesh
    EXPECT_EQ(engine.live_groups(), 1);
  });
}

TEST(GroupLifetime, AGroupLivesUntilItsLastMemberLetsGo) {
  with_engine(4, [](Comm& world, const sim::Engine& engine) {
    std::unique_ptr<Comm> pair = world.split(world.rank() / 2, world.rank());
    if (world.rank() % 2 == 0) pair.reset();  // one member of each pair lets go early
    world.barrier();
    EXPECT_EQ(engine.live_groups(), 3) << "both pairs still have a member holding them";
    world.barrier();  // every rank has counted before any lets go
    pair.reset();
    world.barrier();
    EXPECT_EQ(engine.live_groups(), 1);
  });
}

TEST(GroupLifetime, HierarchicalAllReduceSplitsOncePerComm) {
  with_engine(16, [](Comm& world, const sim::Engine& engine) {  // 2 nodes of 8
    std::vector<float> buf(4);
    for (int step = 0; step < 3; ++step) {
      std::iota(buf.begin(), buf.end(), float(world.rank()));
      hierarchical_all_reduce(world, view_of(buf), ReduceOp::sum);
      EXPECT_EQ(buf[1], 16 * 1 + 120) << "rank " << world.rank() << ", step " << step;  // sum of r + 1 over 16 ranks
      world.barrier();
      EXPECT_EQ(engine.live_groups(), 1 + 2 + 1) << "the world, 2 node groups and the leaders, step " << step;
      world.barrier();  // every rank has counted before the first leaves
    }
  });
}
