#include "ranks_per_node.h"

#include <algorithm>
#include <vector>

#include "labkit/error.h"

namespace labkit {

int ranks_per_node(const Comm& comm, std::string_view op) {
  const std::vector<int>& nodes = comm.nodes().node;
  const auto per_node = int(std::count(nodes.begin(), nodes.end(), nodes.front()));
  std::vector<int> firsts;  // each run of per_node ranks' node: all distinct when the nodes are filled evenly
  for (int r = 0; r < comm.size(); r += per_node) firsts.push_back(nodes[std::size_t(r)]);
  std::sort(firsts.begin(), firsts.end());
  const bool distinct = std::adjacent_find(firsts.begin(), firsts.end()) == firsts.end();
  for (int r = 0; r < comm.size(); ++r)
    if (!distinct || comm.size() % per_node != 0 || nodes[std::size_t(r)] != nodes[std::size_t(r - r % per_node)])
      fail(comm.who(), op, "quantize_gradients: the {} ranks do not fill their nodes evenly, {} to "
           "a node (rank {} is on node {}); qgZ's all-to-all hops need the same count on every node", comm.size(),
           per_node, r, nodes[std::size_t(r)]);
  return per_node;
}

}  // namespace labkit
