#include "labkit/collective.h"

#include <stdexcept>
#include <string>

namespace labkit {

namespace {
// Bus bandwidth factors: all_reduce moves 2(P-1)/P of the buffer over each
// rank's link, the one-pass collectives (P-1)/P, broadcast and reduce the whole.
double two_passes(int p) { return 2.0 * (p - 1) / p; }
double one_pass(int p) { return double(p - 1) / p; }
double whole_buffer(int) { return 1; }

// Every collective, once, in enum order.
constexpr std::array<CollectiveInfo, kCollectives.size()> kInfo = {{
    // op                          name              root   reduce counts             bus factor    native cost
    {Collective::broadcast,      "broadcast",      true,  false, Counts::in_place,  whole_buffer, NativeCost::nccl},
    {Collective::reduce,         "reduce",         true,  true,  Counts::in_place,  whole_buffer, NativeCost::nccl},
    {Collective::all_reduce,     "all_reduce",     false, true,  Counts::in_place,  two_passes,   NativeCost::nccl},
    {Collective::gather,         "gather",         true,  false, Counts::gathers,   one_pass,     NativeCost::point_to_point},
    {Collective::scatter,        "scatter",        true,  false, Counts::scatters,  one_pass,     NativeCost::point_to_point},
    {Collective::all_gather,     "all_gather",     false, false, Counts::gathers,   one_pass,     NativeCost::nccl},
    {Collective::reduce_scatter, "reduce_scatter", false, true,  Counts::scatters,  one_pass,     NativeCost::nccl},
    {Collective::all_to_all,     "all_to_all",     false, false, Counts::exchanges, one_pass,     NativeCost::point_to_point},
    {Collective::all_to_allv,    "all_to_allv",    false, false, Counts::per_peer,  one_pass,     NativeCost::point_to_point},
    {Collective::barrier,        "barrier",        false, false, Counts::none,      whole_buffer, NativeCost::dissemination},
}};

constexpr bool in_enum_order() {
  for (std::size_t i = 0; i < kInfo.size(); ++i)
    if (kInfo[i].op != kCollectives[i]) return false;
  return true;
}
static_assert(in_enum_order(), "kInfo lists the collectives in enum order");
}  // namespace

const CollectiveInfo& info(Collective c) { return kInfo[static_cast<std::size_t>(c)]; }

std::string_view name_of(Collective c) { return info(c).name; }

Collective parse_collective(std::string_view name) {
  for (const CollectiveInfo& c : kInfo)
    if (name == c.name) return c.op;
  std::string names;
  for (const CollectiveInfo& c : kInfo) names += (names.empty() ? "" : ", ") + std::string(c.name);
  throw std::invalid_argument("unknown collective '" + std::string(name) + "' (" + names + ")");
}

}  // namespace labkit
