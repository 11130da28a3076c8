// The visualizer's state, shared by every panel (Dear ImGui style: state lives
// in the app and is passed in; panels are functions that draw it each frame).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "scenario.h"
#include "summary.h"
#include "trace_model.h"

namespace viz {

struct CollectiveScenario;  // scenarios/collective.h

struct App {
  TraceModel model;
  Summary summary;          // of `model`
  std::unique_ptr<Scenario> scenario = parse_scenario("ring:8:1M");  // what the "run" panel simulates
  bool from_scenario = false;  // the model is a run of `scenario` (so a collective's algbw and busbw apply)
  ChunkHistory chunks;         // for the data-flow view, when the scenario has one
  RoutingHistory routing;      // for the MoE routing panel, when the scenario trains the MoE GPT
  int routing_layer = 0;
  int routing_step = -1;       // the step the bars show; -1: the last
  std::array<char, 512> trace_path{};  // the "open" box
  std::string error;        // the last load or run error, shown instead of crashing
  double view_start = 0;    // timeline window, seconds
  double view_span = 0;     // 0: fit the whole trace on the next frame
  double cursor = 0;        // the scrubber: the time the data-flow view shows
  bool playing = false;
  float speed = 1;          // trace seconds per wall second, relative to the trace's length / 10
};

// A panel is a window drawn every frame where it applies to what is shown.
// Labs register their own (memory bars, the pipeline grid, MoE routing) the
// same way this lab's panels do, in panels.cpp: a name, a function of the App,
// and when it applies (always, where none is given).
struct Panel {
  std::string name;
  std::function<void(App&)> draw;
  std::function<bool(const App&)> applies;
};
std::vector<Panel>& panels();
void register_panel(std::string name, std::function<void(App&)> draw,
                    std::function<bool(const App&)> applies = [](const App&) { return true; });

void register_builtin_panels();  // timeline, data flow, summary, run, pipeline grid, MoE routing

// Shows a trace: the model, its summary, the whole run in the timeline.
void show(App& app, TraceModel model);
// Simulates app.scenario and shows it, with its chunk history when there is one.
void run_scenario(App& app);
// The collective scenario whose run is shown, or null (a trace, or a lab's step).
const CollectiveScenario* shown_collective(const App& app);

}  // namespace viz
