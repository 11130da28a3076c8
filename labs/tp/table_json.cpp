// What lab::Table lacks for this lab: columns printed but not written to the
// JSON (the tp table's heads, the what-if's comm share), whose values the JSON
// already holds in other keys.
#include "tp.h"

namespace tp_lab {

nlohmann::json without(nlohmann::json rows, std::initializer_list<const char*> printed_only) {
  for (nlohmann::json& row : rows)
    for (const char* key : printed_only) row.erase(key);
  return rows;
}

}  // namespace tp_lab
