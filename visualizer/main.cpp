// labkit-viz: setup -> loop (poll, new frame, one call per panel, render) -> cleanup,
// as Dear ImGui's example_glfw_opengl3.
//
//   labkit-viz [trace.json]                     open a trace from any backend
//   labkit-viz --scenario ring:8:1M             simulate one live (ALGO:RANKS:SIZE)
//   labkit-viz --headless --scenario ring:8:1M --frames 3 --screenshot out/ring.png
//
// --headless draws into a hidden window (run it under xvfb-run without a
// display) and writes a PNG: the book's pictures of the visualizer come from it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <GLFW/glfw3.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>
#include <stb_image_write.h>

#include "app.h"
#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/output.h"

namespace {

// The first frame's layout: timeline along the bottom, the rest above it.
void place(float x, float y, float w, float h, ImVec2 screen) {
  ImGui::SetNextWindowPos({x * screen.x, y * screen.y}, ImGuiCond_FirstUseEver);
  ImGui::SetNextWindowSize({w * screen.x, h * screen.y}, ImGuiCond_FirstUseEver);
}

// Draws one frame; returns the names of the panels it drew.
std::vector<std::string> draw_frame(viz::App& app, ImVec2 screen) {
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  ImGui::NewFrame();
  // Timeline, data flow, summary, run, pipeline grid, MoE routing, each where
  // it applies; a pipeline step's grid, or a training's routing, takes the
  // upper half of the timeline's place.
  std::vector<viz::Panel*> shown;
  for (viz::Panel& p : viz::panels())
    if (p.applies(app)) shown.push_back(&p);
  const bool lab_panel = std::any_of(shown.begin(), shown.end(), [](const viz::Panel* p) {
    return p->name == "Pipeline grid" || p->name == "MoE routing";
  });
  struct Place {
    float x, y, w, h;
  };
  const Place wide{0, 0.5f, 1, 0.25f};
  const std::map<std::string, Place> layout = {{"Timeline", {0, lab_panel ? 0.75f : 0.5f, 1, lab_panel ? 0.25f : 0.5f}},
                                               {"Data flow", {0, 0, 0.4f, 0.5f}},
                                               {"Summary", {0.4f, 0, 0.35f, 0.5f}},
                                               {"Run", {0.75f, 0, 0.25f, 0.5f}},
                                               {"Pipeline grid", wide},
                                               {"MoE routing", wide}};
  for (viz::Panel* p : shown) {
    const auto l = layout.find(p->name);
    if (l != layout.end()) place(l->second.x, l->second.y, l->second.w, l->second.h, screen);
    p->draw(app);
  }
  ImGui::Render();
  std::vector<std::string> names;
  for (const viz::Panel* p : shown) names.push_back(p->name);
  return names;
}

void save_png(const std::string& path, int width, int height) {
  std::vector<unsigned char> pixels(std::size_t(width) * height * 4);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, width, height, GL_RGBA, GL_UNSIGNED_BYTE, pixels.data());
  std::vector<unsigned char> flipped(pixels.size());  // OpenGL's rows run bottom to top
  for (int y = 0; y < height; ++y)
    std::copy_n(&pixels[std::size_t(height - 1 - y) * width * 4], width * 4, &flipped[std::size_t(y) * width * 4]);
  labkit::create_file(path).close();  // folders, and a clear error if it cannot be written
  if (!stbi_write_png(path.c_str(), width, height, 4, flipped.data(), width * 4))
    throw labkit::Error("--screenshot: cannot write '" + path + "'");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"labkit-viz: watch the chunks move and read the timeline"};
  labkit::cli::one_line_errors(cli);
  std::string trace, scenario, screenshot;
  bool headless = false;
  constexpr int kWarmup = 2;  // the first frames compile shaders and lay out windows
  int frames = kWarmup + 1, width = 1280, height = 800;
  cli.add_option("trace", trace, "a Chrome trace (--trace of any lab, any backend)");
  cli.add_option("--scenario", scenario, "simulate ALGO:RANKS:SIZE[:COLLECTIVE[:TOPOLOGY]], e.g. ring:8:1M, a DDP step: "
                 "ddp:8:overlap, a ZeRO step: fsdp:16:3:both, a tensor-parallel step of the tiny GPT: tp:4:sp, ring "
                 "attention: cp:8:contiguous, a pipeline schedule: pp:4:zb-h1:8, or the MoE GPT's training: "
                 "moe:4:none:40")
      ->check(labkit::cli::parsed_by(viz::parse_scenario));
  CLI::Option* unseen =
      cli.add_flag("--headless", headless, "draw without showing a window (under xvfb-run), then exit");
  cli.add_option("--frames", frames, "--headless: frames to draw, the first two to warm up (shaders, the windows' "
                                     "layout), the rest timed")
      ->capture_default_str()->check(labkit::cli::at_least(kWarmup + 1))->needs(unseen);
  cli.add_option("--screenshot", screenshot, "--headless: write the last frame to this PNG")
      ->check(labkit::cli::output_file({".png"}))->needs(unseen);
  // X refuses a window past its screen's largest, and GL textures stop at 8192 on many drivers.
  cli.add_option("--width", width)->capture_default_str()->check(labkit::cli::in_range(1, 8192));
  cli.add_option("--height", height)->capture_default_str()->check(labkit::cli::in_range(1, 8192));
  CLI11_PARSE(cli, argc, argv);

  viz::App app;
  try {
    if (!trace.empty()) {
      viz::show(app, viz::load_chrome_trace(trace));
    } else {
      if (!scenario.empty()) app.scenario = viz::parse_scenario(scenario);
      viz::run_scenario(app);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }

  glfwSetErrorCallback([](int code, const char* what) { fmt::print(stderr, "glfw error {}: {}\n", code, what); });
  if (!glfwInit()) {
    fmt::print(stderr, "error: no display (run under xvfb-run for --headless)\n");
    return 1;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
  if (headless) glfwWindowHint(GLFW_VISIBLE, GLFW_FALSE);
  GLFWwindow* window = glfwCreateWindow(width, height, "labkit-viz", nullptr, nullptr);
  if (!window) {
    fmt::print(stderr, "error: cannot open an OpenGL 3 window\n");
    glfwTerminate();
    return 1;
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(headless ? 0 : 1);
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;  // the same layout every run
  ImGui::StyleColorsDark();
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 130");
  viz::register_builtin_panels();

  int status = 0;
  std::vector<std::string> panels;  // the last frame's
  auto start = std::chrono::steady_clock::now();
  for (int frame = 0; headless ? frame < frames : !glfwWindowShouldClose(window); ++frame) {
    if (frame == kWarmup) start = std::chrono::steady_clock::now();
    glfwPollEvents();
    int w, h;
    glfwGetFramebufferSize(window, &w, &h);
    panels = draw_frame(app, {float(w), float(h)});
    glViewport(0, 0, w, h);
    glClearColor(0.1f, 0.1f, 0.12f, 1);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    if (headless && frame == frames - 1 && !screenshot.empty()) {
      try {
        save_png(screenshot, w, h);
      } catch (const std::exception& e) {
        fmt::print(stderr, "error: {}\n", e.what());
        status = 1;
      }
    }
    glfwSwapBuffers(window);
  }
  if (headless) {
    glFinish();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("{} ({} ranks, {} events): {:.2f} ms per frame over {} frames after {} warm-up, {} vertices\n"
               "panels: {}\n",
               app.model.source, app.model.ranks, app.model.events, 1e3 * seconds / (frames - kWarmup),
               frames - kWarmup, kWarmup, ImGui::GetDrawData()->TotalVtxCount, fmt::join(panels, ", "));
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return status;
}
