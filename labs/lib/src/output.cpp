#include "labkit/lab/output.h"

#include "labkit/error.h"
#include "labkit/output.h"

namespace labkit::lab {

void write_json(const std::string& path, const nlohmann::json& value) {
  if (path.empty()) return;
  std::ofstream out = create_file(path);
  out << value.dump(2) << '\n';
  out.flush();
  if (!out) throw Error("cannot write '" + path + "': the disk is full, or the file went away");
}

}  // namespace labkit::lab
