// The panel registry. Labs add theirs with register_panel; the visualizer draws
// every registered panel each frame, in registration order.
#include "app.h"

namespace viz {

void draw_timeline(App& app);
void draw_dataflow(App& app);
void draw_summary(App& app);
void draw_run(App& app);

std::vector<Panel>& panels() {
  static std::vector<Panel> registered;
  return registered;
}

void register_panel(std::string name, std::function<void(App&)> draw) {
  panels().push_back({std::move(name), std::move(draw)});
}

void register_builtin_panels() {
  register_panel("Timeline", draw_timeline);
  register_panel("Data flow", draw_dataflow);
  register_panel("Summary", draw_summary);
  register_panel("Run", draw_run);
}

}  // namespace viz
