// The book cannot go stale: every ```console block in book/*.md is run, and each
// command's output must match what the book shows, and it must end as the book
// says it does (expected_status). A block looks like
//
//   ```console
//   $ ./labkit lab collectives --op all_reduce --ranks 4
//   <the output, exactly>
//   ```
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>

#include <sys/wait.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace fs = std::filesystem;

namespace {

struct Command {
  int line;
  std::string command;
  std::string expected;
};

std::vector<Command> console_commands(const fs::path& chapter) {
  std::ifstream in(chapter);
  std::vector<Command> out;
  std::string line;
  bool inside = false;
  for (int n = 1; std::getline(in, line); ++n) {
    if (!inside) {
      inside = line == "```console";
    } else if (line == "```") {
      inside = false;
    } else if (line.rfind("$ ", 0) == 0) {
      out.push_back({n, line.substr(2), ""});
    } else if (!out.empty()) {
      out.back().expected += line + "\n";
    }
  }
  return out;
}

struct Ran {
  std::string output;
  int status = -1;  // the pipeline's, as bash's pipefail gives it: the last command that failed
};

Ran run(const std::string& command) {
  std::string quoted;  // for bash -c '...'
  for (char c : fmt::format("cd '{}' && LABKIT_NO_BUILD=1 LABKIT_BUILD_DIR='{}' {} 2>&1", LABKIT_SOURCE_DIR,
                            LABKIT_BINARY_DIR, command))
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  Ran ran;
  FILE* pipe = popen(("bash -o pipefail -c '" + quoted + "'").c_str(), "r");
  if (!pipe) return {"popen failed"};
  std::array<char, 4096> buf;
  while (std::size_t n = fread(buf.data(), 1, buf.size(), pipe)) ran.output.append(buf.data(), n);
  const int status = pclose(pipe);
  ran.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return ran;
}

// The status a command the book shows should end with: 0; not 0 where the book
// shows it refusing ("error: ...", or the front door's "labkit: ..."); 1 for a
// diff that shows a difference; and a
// lab that `| head` cut off ends with SIGPIPE (141), as it does for a reader.
bool expected_status(const Command& c, int status) {
  if (c.command.starts_with("diff ")) return status == (c.expected.empty() ? 0 : 1);  // 1: the files differ
  if (c.expected.starts_with("error: ") || c.expected.starts_with("labkit: ") ||
      c.expected.find("\nerror: ") != std::string::npos)
    return status != 0;
  return status == 0 || (status == 141 && c.command.find("| head") != std::string::npos);
}

std::string without_trailing_newlines(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// A difference at the rounding level: a number in scientific notation below
// 1e-4 (how the labs print a parallel run's distance from one rank's). Its
// digits depend on the CPU (OpenBLAS picks its kernels by the CPU it runs
// on), its size does not: the book holds it to the same side of 1e-4.
bool rounding_level(const std::string& token) {
  if (token.find("e-") == std::string::npos) return false;
  char* end = nullptr;
  const double v = std::strtod(token.c_str(), &end);
  return end == token.c_str() + token.size() && std::abs(v) < 1e-4;
}

// Two numbers printed to the same places that differ by one unit in the last
// of them: a loss that rounds to 3.4110 on one CPU and 3.4111 on another, for
// the same reason.
bool last_place_apart(const std::string& a, const std::string& b) {
  if (a.size() != b.size() || a.find_first_of("eE") != std::string::npos) return false;
  const std::size_t point = a.find('.');
  if (point == std::string::npos || point != b.find('.')) return false;
  char *end_a = nullptr, *end_b = nullptr;
  const double x = std::strtod(a.c_str(), &end_a), y = std::strtod(b.c_str(), &end_b);
  if (end_a != a.c_str() + a.size() || end_b != b.c_str() + b.size()) return false;
  return std::abs(x - y) <= 1.5 * std::pow(10.0, -double(a.size() - point - 1));
}

// A token without the punctuation around it, "(9.1e-09)," as 9.1e-09.
std::string bare_number(const std::string& token) {
  const std::size_t first = token.find_first_not_of("([");
  const std::size_t last = token.find_last_not_of(")],;:");
  return first == std::string::npos || last < first ? token : token.substr(first, last - first + 1);
}

// Two lines that say the same: equal, or equal but for rounding-level numbers.
bool same_line(const std::string& a, const std::string& b) {
  if (a == b) return true;
  std::istringstream ta(a), tb(b);
  std::string x, y;
  for (;;) {
    const bool more_x = bool(ta >> x), more_y = bool(tb >> y);
    if (!more_x || !more_y) return more_x == more_y && a.size() == b.size();
    if (x == y) continue;
    x = bare_number(x), y = bare_number(y);
    if (!(rounding_level(x) && rounding_level(y)) && !last_place_apart(x, y)) return false;
  }
}

// The first line where two texts differ (trailing blank lines aside), for a
// message a reader can act on.
std::string first_difference(const std::string& want, const std::string& got) {
  std::istringstream a(without_trailing_newlines(want)), b(without_trailing_newlines(got));
  std::string la, lb;
  for (int n = 1;; ++n) {
    const bool more_a = bool(std::getline(a, la)), more_b = bool(std::getline(b, lb));
    if (!more_a && !more_b) return "";
    if (!more_a || !more_b || !same_line(la, lb))
      return fmt::format("output line {}:\n  book: {}\n  now:  {}", n, more_a ? la : "<end>", more_b ? lb : "<end>");
  }
}

class Book : public ::testing::TestWithParam<std::string> {};

TEST_P(Book, EveryCommandPrintsWhatTheChapterShows) {
  const fs::path chapter = fs::path(LABKIT_SOURCE_DIR) / "book" / GetParam();
  const std::vector<Command> commands = console_commands(chapter);
  for (const Command& c : commands) {
    const Ran ran = run(c.command);
    const std::string diff = first_difference(c.expected, ran.output);
    EXPECT_EQ(diff, "") << GetParam() << ":" << c.line << ": $ " << c.command << "\n"
                        << "Update the book with what the command prints now, or fix the regression.";
    EXPECT_TRUE(expected_status(c, ran.status)) << GetParam() << ":" << c.line << ": $ " << c.command
                                                << "\nexited with status " << ran.status;
  }
}

// No dangling references: every "chapter N" in the book and in the code a
// learner reads (labs, the libraries, the visualizer, the solutions) names a
// chapter that exists, book/NN-*.md.
TEST(BookReferences, EveryChapterReferredToExists) {
  const fs::path root(LABKIT_SOURCE_DIR);
  std::set<int> present;
  for (const auto& entry : fs::directory_iterator(root / "book")) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".md" && std::isdigit(static_cast<unsigned char>(name[0])))
      present.insert(std::stoi(name));
  }
  const std::regex reference(R"([Cc]hapters? (\d+))");
  int checked = 0;
  for (const char* dir : {"book", "labs", "core", "parallel", "backends", "visualizer", "solutions", "bench"})
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".md" && ext != ".cpp" && ext != ".h" && ext != ".cu") continue;
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n)
        for (std::sregex_iterator m(line.begin(), line.end(), reference), end; m != end; ++m, ++checked)
          EXPECT_TRUE(present.count(std::stoi((*m)[1].str())))
              << fs::relative(entry.path(), root).string() << ":" << n << ": " << (*m)[0].str() << " does not exist";
    }
  EXPECT_GT(checked, 20);
}

// A bash array of labs.sh, the build's list of labs: NAME=(a b c).
std::vector<std::string> labs_sh_array(const std::string& name) {
  std::ifstream in(fs::path(LABKIT_BINARY_DIR) / "labs.sh");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with(name + "=(")) {
      std::istringstream words(line.substr(name.size() + 2, line.size() - name.size() - 3));
      return {std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
    }
  return {};
}

// The README's table whose header row starts with `header`: each row's cells.
std::vector<std::vector<std::string>> readme_table(const std::string& header) {
  std::ifstream in(fs::path(LABKIT_SOURCE_DIR) / "README.md");
  std::vector<std::vector<std::string>> rows;
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!inside) {
      if ((inside = line.starts_with(header))) std::getline(in, line);  // |---|---|
      continue;
    }
    if (!line.starts_with("| ")) break;
    std::vector<std::string> cells;
    std::istringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');) {
      const std::size_t first = cell.find_first_not_of(' '), last = cell.find_last_not_of(' ');
      cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
    }
    rows.push_back(cells);
  }
  return rows;
}

// The README's tables name every lab the build registers (labs/CMakeLists.txt),
// in chapter order, each with a chapter that exists, and every lab with
// exercises with exercises that exist (the compute lab once had no row).
TEST(Readme, ListsEveryLabWithItsChapterAndExercises) {
  const std::vector<std::string> labs = labs_sh_array("LABS"), mine = labs_sh_array("MINE");
  ASSERT_GT(labs.size(), 8u);
  std::vector<std::string> named;
  for (const auto& row : readme_table("| lab | what you learn | chapter |")) {
    named.push_back(row[0]);
    const std::regex link(R"(\]\((book/[^)#]+))");
    std::smatch m;
    if (!std::regex_search(row[2], m, link)) {
      ADD_FAILURE() << row[0] << ": no chapter linked: " << row[2];
      continue;
    }
    EXPECT_TRUE(fs::exists(fs::path(LABKIT_SOURCE_DIR) / m[1].str())) << row[0] << ": " << m[1] << " does not exist";
  }
  EXPECT_EQ(named, labs) << "README.md's table of labs";
  named.clear();
  std::set<std::string> exercise_files;
  for (const auto& entry : fs::recursive_directory_iterator(fs::path(LABKIT_SOURCE_DIR) / "exercises"))
    exercise_files.insert(entry.path().filename().string());
  for (const auto& row : readme_table("| lab | exercises |")) {
    named.push_back(row[0]);
    std::istringstream exercises(row[1]);
    for (std::string exercise; std::getline(exercises >> std::ws, exercise, ',');)
      EXPECT_TRUE(exercise_files.contains(exercise + ".cpp")) << row[0] << ": no exercises/*/" << exercise << ".cpp";
  }
  EXPECT_EQ(named, mine) << "README.md's table of exercises";
}

std::vector<std::string> chapters() {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(fs::path(LABKIT_SOURCE_DIR) / "book"))
    if (entry.path().extension() == ".md") out.push_back(entry.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

INSTANTIATE_TEST_SUITE_P(Chapters, Book, ::testing::ValuesIn(chapters()), [](const auto& info) {
  std::string name = info.param.substr(0, info.param.size() - 3);
  for (char& ch : name) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
});

}  // namespace
