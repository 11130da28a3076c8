// The lab library (labs/lib): what every lab prints, draws and takes on its
// command line, checked once here rather than through each lab's output.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "labkit/error.h"
#include "labkit/lab/bench.h"
#include "labkit/lab/plot.h"
#include "labkit/lab/table.h"
#include "labkit/lab/training_options.h"
#include "labkit/lab/what_if.h"

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

// What `print` writes to standard output.
template <class Print>
std::string printed(Print print) {
  testing::internal::CaptureStdout();
  print();
  std::fflush(stdout);
  return testing::internal::GetCapturedStdout();
}

// Parses `args` (after the program's name) into `app`; the parse error's message, or "" where it parsed.
std::string parse(CLI::App& app, std::vector<std::string> args) {
  args.insert(args.begin(), "lab");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(int(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
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
    EXPECT_EQ(std::string(e.what()), "--plot " + path + ": gnuplot failed");
  }
}

// The columns every LabTable test prints: a name left, a number right, a JSON-only value.
std::vector<lab::Column> name_and_time() {
  return {{.header = "run", .key = "run", .width = 6, .align = lab::Align::left},
          {.header = "time", .key = "seconds", .width = 9},
          {.key = "ranks"}};
}

TEST(LabTable, PrintsOneLinePerRowAndWritesEachRowsKeys) {
  lab::Table table(name_and_time());
  const std::string out = printed([&] {
    table.print_header();
    table.add({"naive", lab::seconds(11.6e-6), 8});
  });
  EXPECT_EQ(out, "run         time\nnaive    11.6 us\n");
  EXPECT_EQ(table.json(), nlohmann::json::parse(R"([{"run": "naive", "seconds": 1.16e-05, "ranks": 8}])"));
}

TEST(LabTable, IndentsTheRowsAndTheHeaderEachItsOwnWay) {
  lab::Table under_a_title(name_and_time(), {.rows = "  "});
  lab::Table commented(name_and_time(), {.rows = "  ", .header = "# "});
  EXPECT_EQ(printed([&] {
              under_a_title.print_header();
              under_a_title.add({"ring", 2, 4});
            }),
            "  run         time\n  ring           2\n");
  EXPECT_EQ(printed([&] {
              commented.print_header();
              commented.add({"ring", 2, 4});
            }),
            "# run         time\n  ring           2\n");
}

TEST(LabTable, ANoteRunsOnTwoSpacesAfterTheLastCellAndIsNotInTheJson) {
  lab::Table table(name_and_time());
  EXPECT_EQ(printed([&] {
              table.add({"shard", lab::seconds(2), 8}, "1.32x stage 0's (target <= 1.5x)");
              table.add({"ddp", lab::seconds(1.5), 8}, "");
            }),
            "shard     2.00 s  1.32x stage 0's (target <= 1.5x)\nddp       1.50 s\n");
  EXPECT_EQ(table.json()[0], nlohmann::json::parse(R"({"run": "shard", "seconds": 2.0, "ranks": 8})"));
}

TEST(LabTable, APrintedRowIsPrintedLikeAnyOtherAndKeptOutOfTheJson) {
  lab::Table table(name_and_time(), {.rows = "  "});
  const std::string out = printed([&] {
    table.add({"ring", 2, 4});
    table.print_row({"total", 2, 4}, "of 2");
  });
  EXPECT_EQ(out, "  ring           2\n  total          2  of 2\n");
  EXPECT_EQ(table.json().size(), 1u);
}

TEST(LabTable, ANumberInUnitsPrintsScaledAndWritesTheWholeValue) {
  const lab::Cell gb = lab::number(1.5e9, "{:.3g} GB", 1e9), whole = lab::number(std::uint64_t(3), "{:.1f}", 2);
  EXPECT_EQ(gb.text, "1.5 GB");
  EXPECT_EQ(gb.value, 1.5e9);
  EXPECT_EQ(whole.text, "1.5");
  EXPECT_TRUE(whole.value.is_number_unsigned()) << whole.value;  // an integer stays one in the JSON
}

TEST(LabTable, AnEmptyCellThatKeepsItsPlacePrintsItsGapAtTheEndOfARow) {
  lab::Table table({{.header = "run", .key = "run", .width = 6, .align = lab::Align::left},
                    {.header = "note", .align = lab::Align::left, .gap = 2, .keep_empty = true}});
  EXPECT_EQ(printed([&] {
              table.print_header();
              table.add({"ring", "differs"});
              table.add({"tree", ""});
            }),
            "run     note\nring    differs\ntree    \n");
}

TEST(LabTable, AGroupedRowWritesAnObjectPerGroupBesideTheColumnsOfNone) {
  lab::Table table({{.header = "ranks", .key = "ranks", .width = 5},
                    {.header = "stage 0", .key = "exposed", .width = 8, .group = "0"},
                    {.key = "stage", .group = "0"},
                    {.header = "stage 3", .key = "exposed", .width = 8, .group = "3"},
                    {.key = "stage", .group = "3"}});
  EXPECT_EQ(printed([&] { table.add({8, 0.5, 0, 0.25, 3}); }), "    8      0.5     0.25\n");
  EXPECT_EQ(table.json(), nlohmann::json::parse(R"([{"ranks": 8, "stage": 0, "exposed": 0.5},
                                                    {"ranks": 8, "stage": 3, "exposed": 0.25}])"));
}

TEST(LabTable, ARowOfTheWrongLengthIsAMistakeInTheLab) {
  lab::Table table(name_and_time());
  EXPECT_THROW(table.add({"ring", 2}), std::logic_error);
  EXPECT_THROW(table.print_row({"ring"}), std::logic_error);
}

TEST(LabBench, TheTableWritesEachRowsWallTimeAndTheColumnsALabAdds) {
  lab::Table table = lab::bench_table(8, {{.key = "schedule"}});
  const std::string out = printed([&] {
    table.print_header();
    table.add({"1f1b, 4", lab::seconds(2), "1f1b"}, "1.20x");
  });
  EXPECT_EQ(out, "run            wall\n1f1b, 4      2.00 s  1.20x\n");
  EXPECT_EQ(table.json(), nlohmann::json::parse(R"([{"seconds": 2.0, "schedule": "1f1b"}])"));
}

TEST(LabTrainingOptions, TheLrHelpShowsOneDefault) {
  lab::TrainingOptions o{.lr = 0.05f};
  CLI::App shown, said;
  lab::add_training_options(shown, o, {});
  lab::add_training_options(said, o, {.lr = "learning rate (default 0.05 with sgd, 0.003 with adamw)",
                                      .lr_says_its_default = true});
  EXPECT_NE(shown.help().find("=0.05"), std::string::npos) << shown.help();
  EXPECT_EQ(said.help().find("=0.05"), std::string::npos) << said.help();
  EXPECT_NE(said.help().find("(default 0.05 with sgd"), std::string::npos) << said.help();
}

TEST(LabWhatIf, TakesAModelPresetAndNamesOneItDoesNotKnow) {
  std::string model;
  double seconds = 2;
  CLI::App app;
  lab::add_what_if(app, model, "a model preset");
  lab::add_step_seconds(app, seconds);
  EXPECT_EQ(parse(app, {"--what-if", "llama2-7b", "--step-seconds", "0.5"}), "");
  EXPECT_EQ(model, "llama2-7b");
  EXPECT_EQ(seconds, 0.5);
  EXPECT_NE(parse(app, {"--what-if", "bogus-9b"}).find("bogus-9b"), std::string::npos);
  EXPECT_NE(parse(app, {"--step-seconds", "0"}), "");
}

TEST(LabWhatIf, TheSeqHelpShowsADefaultOnlyWhereItIsALength) {
  int fixed = 4096, the_models = 0;
  CLI::App with_length, with_models;
  lab::add_what_if_seq(with_length, fixed, "--what-if: tokens per sequence");
  lab::add_what_if_seq(with_models, the_models, "with --what-if: the sequence length (default: the model's)");
  EXPECT_NE(with_length.help().find("=4096"), std::string::npos) << with_length.help();
  EXPECT_EQ(with_models.help().find("=0"), std::string::npos) << with_models.help();
  EXPECT_NE(parse(with_models, {"--seq", "0"}), "");
  EXPECT_NE(parse(with_models, {"--seq", "2000000"}), "");
}
