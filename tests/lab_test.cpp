// The lab library (labs/lib): what every lab prints, draws and takes on its
// command line, checked once here rather than through each lab's output.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "labkit/error.h"
#include "labkit/lab/plot.h"

namespace lab = labkit::lab;

namespace {

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A fresh folder per test, under the build's temporary folder.
std::filesystem::path scratch(const std::string& name) {
  const std::filesystem::path folder = std::filesystem::temp_directory_path() / ("labkit_lab_test_" + name);
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  return folder;
}

bool have_gnuplot() { return std::system("gnuplot --version >/dev/null 2>&1") == 0; }

}  // namespace

TEST(LabPlot, DrawsTheDatablockToAnSvgAndLeavesNoFileBesideIt) {
  if (!have_gnuplot()) GTEST_SKIP() << "no gnuplot on this machine";
  const std::filesystem::path folder = scratch("svg");
  const std::string path = (folder / "figure.svg").string();
  // Two blocks: `index` picks each, and each point's label shows that its row was read.
  lab::plot(path, {.width = 400, .height = 300}, "1 2 first_a\n2 4 first_b\n\n\n1 3 second_a\n",
            "plot $data index 0 using 1:2:3 with labels notitle, $data index 1 using 1:2:3 with labels notitle\n");
  const std::string svg = read(path);
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("width=\"400\" height=\"300\""), std::string::npos) << svg.substr(0, 400);
  for (const char* label : {"first_a", "first_b", "second_a"})  // noenhanced: '_' prints as itself
    EXPECT_NE(svg.find(std::string(">") + label + "<"), std::string::npos) << label;
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(folder), {}), 1);  // the figure alone
}

TEST(LabPlot, APngNameDrawsAPng) {
  if (!have_gnuplot()) GTEST_SKIP() << "no gnuplot on this machine";
  const std::string path = (scratch("png") / "figure.png").string();
  lab::plot(path, {}, "1 1\n2 2\n", "plot $data using 1:2 with lines notitle\n");
  EXPECT_EQ(read(path).substr(1, 3), "PNG");
}

TEST(LabPlot, AScriptGnuplotRefusesIsAnError) {
  if (!have_gnuplot()) GTEST_SKIP() << "no gnuplot on this machine";
  const std::string path = (scratch("fails") / "figure.svg").string();
  try {
    lab::plot(path, {}, "1 1\n", "plot $data using 1:2 with nosuchstyle\n");
    FAIL() << "gnuplot's error passed silently";
  } catch (const labkit::Error& e) {
    EXPECT_STREQ(e.what(), "--plot: gnuplot failed");
  }
}
