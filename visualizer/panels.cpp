// The panel registry. Labs add theirs with register_panel; the visualizer draws
// every registered panel that applies each frame, in registration order.
#include "app.h"
#include "scenarios/collective.h"

namespace viz {

void draw_timeline(App& app);
void draw_dataflow(App& app);
void draw_summary(App& app);
void draw_run(App& app);
void draw_pipeline(App& app);
void draw_moe_routing(App& app);

std::vector<Panel>& panels() {
  static std::vector<Panel> registered;
  return registered;
}

void register_panel(std::string name, std::function<void(App&)> draw, std::function<bool(const App&)> applies) {
  panels().push_back({std::move(name), std::move(draw), std::move(applies)});
}

void show(App& app, TraceModel model) {
  app.model = std::move(model);
  app.summary = summarize(app.model);
  app.chunks = {};
  app.routing = {};
  app.from_scenario = false;
  app.error.clear();
  app.view_span = 0;                // fit the whole run
  app.cursor = app.model.end / 3;  // a moment with messages in flight
}

void run_scenario(App& app) {
  ScenarioRun run = app.scenario->run();
  show(app, std::move(run.trace));
  app.chunks = std::move(run.chunks);
  app.routing = std::move(run.routing);
  app.routing_step = -1;
  app.from_scenario = true;
}

const CollectiveScenario* shown_collective(const App& app) {
  return app.from_scenario ? dynamic_cast<const CollectiveScenario*>(app.scenario.get()) : nullptr;
}

void register_builtin_panels() {
  register_panel("Timeline", draw_timeline);
  register_panel("Data flow", draw_dataflow);
  register_panel("Summary", draw_summary);
  register_panel("Run", draw_run);
  register_panel("Pipeline grid", draw_pipeline,
                 [](const App& app) { return app.summary.pipeline_microbatches > 0 && app.model.end > 0; });
  register_panel("MoE routing", draw_moe_routing, [](const App& app) { return !app.routing.steps.empty(); });
}

}  // namespace viz
