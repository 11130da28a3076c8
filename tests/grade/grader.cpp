// The grader: scores the exercises of one or more labs, each graded test in a
// process of its own, so that nothing a learner writes can stop the others
// from being graded.
//
//   grader [LAB...] [--timeout 10] [--jobs N] [--gradescope results.json] [--build-log FILE]
//
// The exercises come from the manifest CMake writes (grade_manifest.json: lab,
// exercise, binary; each binary links the learner's version of one exercise and
// the reference of everything else). For every test of every exercise the
// grader starts that binary on that one test (worker.h), at most --jobs at a
// time, and reads the trail the test leaves: its outcome, or the signal it died
// of and the configuration it was checking, or, past --timeout, what each rank
// was doing. Scoring: an exercise is worth `points`; it earns points x passed /
// tests, and nothing if a pattern test failed (right values by the wrong
// communication pattern are not the exercise).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "labkit/cli.h"
#include "worker.h"

namespace cli = labkit::cli;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr double kPoints = 10;           // each exercise
constexpr int kExitTimedOut = 3;         // the worker's watchdog (worker.cpp)
constexpr double kGraceSeconds = 5;      // after the watchdog, before SIGKILL

// When a test's process is killed: past its watchdog's last word (worker.h).
double kill_after(double timeout) { return labkit::grade::kWallClockCap * timeout + kGraceSeconds; }

struct Exercise {
  std::string lab, name, binary;
};

struct Test {
  const Exercise* exercise = nullptr;
  std::string name;  // "ring_all_reduce.GivesEveryRankTheSum"
  bool compiled = true;  // false: its binary is missing or broken, so it is not run
  // What came back.
  bool passed = false, pattern = false;
  std::vector<std::string> messages;
};

std::vector<Exercise> read_manifest(const fs::path& path, const std::vector<std::string>& labs) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("--manifest: cannot read {}", path.string()));
  std::vector<Exercise> all, chosen;
  for (const json& e : json::parse(in)) all.push_back({e.at("lab"), e.at("exercise"), e.at("binary")});
  for (const std::string& lab : labs) {
    if (std::any_of(chosen.begin(), chosen.end(), [&](const Exercise& e) { return e.lab == lab; })) continue;
    const auto before = chosen.size();
    for (const Exercise& e : all)
      if (e.lab == lab) chosen.push_back(e);
    if (chosen.size() == before) {
      std::string known;
      for (const Exercise& e : all)
        if (known.find(e.lab) == std::string::npos) known += (known.empty() ? "" : ", ") + e.lab;
      throw std::runtime_error(fmt::format("labs: unknown lab '{}' (graded labs: {})", lab, known));
    }
  }
  return labs.empty() ? all : chosen;
}

// What the compiler said about `e` in the build's log (`./labkit grade` keeps
// ninja's output): the first failed step that compiles exercises/LAYER/NAME.cpp
// or links grade_NAME, without its command line, at most `n` lines; "" if none.
std::string compiler_errors(const fs::path& build_log, const Exercise& e, std::size_t n) {
  std::ifstream in(build_log);
  std::string line, out;
  auto is_its = [&](std::string failed) {  // "FAILED: OUTPUT " (ninja ends it with a space)
    failed.erase(failed.find_last_not_of(' ') + 1);
    const bool compiles_it = failed.find("exercises/") != std::string::npos &&
                             failed.find("/" + e.name + ".cpp") != std::string::npos;
    return compiles_it || failed.ends_with("/grade_" + e.name);
  };
  while (std::getline(in, line) && !(line.starts_with("FAILED: ") && is_its(line))) {}
  if (!in || !std::getline(in, line)) return "";  // the failed step's command line
  std::size_t kept = 0;
  while (std::getline(in, line) && !line.starts_with("FAILED: ") && !line.starts_with("ninja: ") &&
         !(line.starts_with("[") && line.size() > 1 && std::isdigit(static_cast<unsigned char>(line[1])))) {
    if (kept++ == n) {
      out += "...\n";
      break;
    }
    out += line + "\n";
  }
  return out;
}

// Why an exercise has no grade binary, in the words the terminal and Gradescope show.
std::string does_not_compile(const fs::path& build_log, const Exercise& e) {
  const std::string errors = build_log.empty() ? "" : compiler_errors(build_log, e, 20);
  if (errors.empty()) return "does not compile (its grade binary is missing): see the build's errors";
  return "does not compile; the compiler's first errors:\n" + errors;
}

// Runs a command, returning its exit status and what it printed.
std::pair<int, std::string> capture(const std::string& command) {
  std::FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {-1, ""};
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  return {pclose(pipe), out};
}

// The tests of one exercise, as gtest lists them ("Suite.\n  Test\n"), within
// the time a test gets (coreutils' timeout): code that never returns before
// main (a static initialiser) scores 0 with the reason, not a grader that waits.
std::vector<std::string> list_tests(const Exercise& e, double timeout) {
  const auto [status, out] = capture(fmt::format(
      "timeout --kill-after={} {} '{}' --gtest_list_tests '--gtest_filter={}.*' 2>&1", kGraceSeconds, timeout,
      e.binary, e.name));
  if (WIFEXITED(status) && (WEXITSTATUS(status) == 124 || WEXITSTATUS(status) == 137))
    throw std::runtime_error(fmt::format("did not list its tests within --timeout {:g} s: code that runs before main "
                                         "(a static variable's initialiser) never returned", timeout));
  std::vector<std::string> tests;
  std::istringstream lines(out);
  std::string line, suite;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    if (line[0] != ' ') suite = line;
    else tests.push_back(suite + line.substr(2));
  }
  if (status != 0 || tests.empty())
    throw std::runtime_error(fmt::format("{}: could not list the tests of {} (status {}): {}", e.binary, e.name,
                                         status, out));
  return tests;
}

// ---- one test in its own process ------------------------------------------------

struct Running {
  Test* test;
  pid_t pid;
  fs::path report, output;  // its trail, and what it printed
  std::chrono::steady_clock::time_point started;
  bool killed = false;
};

Running start(Test& test, const fs::path& dir, int index, double timeout) {
  const fs::path report = dir / fmt::format("{}.jsonl", index), output = dir / fmt::format("{}.out", index);
  const std::string filter = "--gtest_filter=" + test.name, seconds = fmt::format("{}", timeout);
  std::vector<std::string> args = {test.exercise->binary, filter, "--report", report.string(), "--timeout", seconds};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int error = posix_spawn(&pid, argv[0], &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (error) throw std::runtime_error(fmt::format("cannot start {}: {}", argv[0], std::strerror(error)));
  return {&test, pid, report, output, std::chrono::steady_clock::now()};
}

// The last `n` lines a test printed after GoogleTest's own ("[ RUN      ] ..."),
// each indented: what glibc or the C++ runtime said as the process died.
std::string last_lines(const fs::path& output, std::size_t n) {
  std::ifstream in(output);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("[ RUN ")) lines.clear();
    else if (!line.empty()) lines.push_back(line);
  std::string out;
  for (std::size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i) out += "  " + lines[i] + "\n";
  return out;
}

// Whether an abort is glibc's finding that memory was overwritten: its heap
// checks ("double free or corruption (out)", "free(): invalid next size",
// "malloc(): corrupted top size", "munmap_chunk(): invalid pointer") and the
// stack protector ("*** stack smashing detected ***") abort with these words.
bool memory_corrupted(const std::string& printed) {
  for (const char* words : {"free(): ", "malloc(): ", "double free", "corrupted", "munmap_chunk", "realloc(): ",
                            "stack smashing"})
    if (printed.find(words) != std::string::npos) return true;
  return false;
}

// Reads the trail a test left (worker.h) and its exit status into the test.
void finish(Running& r, int status, double timeout) {
  Test& t = *r.test;
  std::string config, crash, timed_out;
  int crash_rank = -1;
  bool ended = false;
  std::ifstream in(r.report);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    if (j.contains("config")) config = j["config"];
    if (j.contains("pattern")) t.pattern = true;
    if (j.contains("crash")) crash = j["crash"], crash_rank = j["rank"];
    if (j.contains("timeout")) timed_out = j["timeout"];
    if (j.contains("passed")) {
      ended = true;
      t.passed = j["passed"];
      for (const json& m : j["messages"]) t.messages.push_back(m);
    }
  }
  const std::string where = config.empty() ? t.exercise->name : config;
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    t.passed = false;
    if (r.killed) {
      t.messages.push_back(fmt::format("killed after {:g} s in {}: it did not stop (an endless loop?)", kill_after(timeout), where));
      return;
    }
    const std::string name = crash.empty() ? fmt::format("SIG{}", sigabbrev_np(sig)) : "SIG" + crash;
    const std::string rank = crash_rank >= 0 ? fmt::format(", on rank {}", crash_rank) : "";
    if (const std::string printed = last_lines(r.output, 6); sig == SIGABRT && memory_corrupted(printed)) {
      t.messages.push_back(fmt::format(
          "crashed ({}) in {}{}: memory was corrupted. The C library caught it and stopped the process; it "
          "said:\n{}Hint: a write past the end of a buffer (an index or a count too large, a "
          "receive bigger than its buffer) or a double delete, anywhere before this point. AddressSanitizer stops "
          "at the bad write and names its line: configure the asan preset with -DLABKIT_EXERCISES=ON in a build "
          "directory of its own, and run this exercise's grade binary there.",
          name, where, rank, printed));
      return;
    }
    t.messages.push_back(fmt::format(
        "crashed ({}) in {}{}.\nHint: {}", name, where, rank,
        sig == SIGSEGV || sig == SIGBUS ? "a null or dangling pointer, an index past the end of a buffer, or a "
                                          "recursion that never ends; run the lab under gdb to see the line."
        : sig == SIGABRT                ? "an assertion failed or an exception escaped where it cannot be caught."
        : sig == SIGFPE                 ? "an integer division by zero (a count divided by a rank count of 0?)."
                                        : "the process died of this signal."));
    return;
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == kExitTimedOut && !timed_out.empty()) {
    t.passed = false;
    t.messages.push_back(fmt::format("did not finish within the time limit, in {}: {}", where, timed_out));
  } else if (!ended) {
    t.passed = false;
    t.messages.push_back(fmt::format("exited with status {} before the test ended, in {} (a call to exit()?)", code, where));
  }
}

// Runs every test, at most `jobs` at a time, each with its own time limit.
void run_all(std::vector<Test*>& tests, int jobs, double timeout, bool progress) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("labkit-grade-{}", getpid());
  fs::create_directories(dir);
  std::vector<Running> running;
  std::size_t next = 0, done = 0;
  while (done < tests.size()) {
    while (int(running.size()) < jobs && next < tests.size()) {
      running.push_back(start(*tests[next], dir, int(next), timeout));
      ++next;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (auto it = running.begin(); it != running.end();) {
      int status = 0;
      if (waitpid(it->pid, &status, WNOHANG) == it->pid) {
        finish(*it, status, timeout);
        ++done;
        if (progress)
          fmt::print(stderr, "\r[{}/{}] {:<70.70}", done, tests.size(), it->test->name);
        it = running.erase(it);
        continue;
      }
      // The worker's own watchdog reports at `timeout` seconds of CPU time, or at
      // its wall-clock cap on a busy machine; this is for one that cannot.
      const double age = std::chrono::duration<double>(std::chrono::steady_clock::now() - it->started).count();
      if (age > kill_after(timeout) && !it->killed) {
        kill(it->pid, SIGKILL);
        it->killed = true;
      }
      ++it;
    }
  }
  if (progress) fmt::print(stderr, "\r{:<80}\r", "");
  fs::remove_all(dir);
}

// ---- scores ---------------------------------------------------------------------

struct Score {
  const Exercise* exercise = nullptr;
  int passed = 0, total = 0;
  bool pattern_failed = false;
  double points = 0;
  std::string feedback;
};

// Points to the hundredth, as Gradescope shows them: 23.33, not 23.333333333333336.
double in_hundredths(double points) { return std::round(points * 100) / 100; }

std::vector<Score> score(const std::vector<Exercise>& exercises, const std::vector<Test>& tests) {
  std::vector<Score> scores;
  for (const Exercise& e : exercises) {
    Score s;
    s.exercise = &e;
    for (const Test& t : tests) {
      if (t.exercise != &e) continue;
      ++s.total;
      s.passed += t.passed;
      s.pattern_failed |= t.pattern && !t.passed;
      if (t.passed) continue;
      s.feedback += fmt::format("{}{}:\n", t.name.substr(t.name.find('.') + 1), t.pattern ? " (pattern)" : "");
      for (const std::string& m : t.messages) {
        std::istringstream lines(m);
        for (std::string line; std::getline(lines, line);) s.feedback += "  " + line + "\n";
      }
    }
    s.points = s.pattern_failed ? 0 : in_hundredths(kPoints * s.passed / s.total);
    if (s.pattern_failed && s.passed > 0)
      s.feedback += "  The communication pattern is wrong, so the exercise earns nothing, whatever its values.\n";
    scores.push_back(std::move(s));
  }
  return scores;
}

void print_table(const std::vector<Score>& scores) {
  double total = 0;
  for (const Score& s : scores)
    if (!s.feedback.empty()) fmt::print("---- {} / {}\n{}\n", s.exercise->lab, s.exercise->name, s.feedback);
  fmt::print("{:<16} {:<40} {:>7} {:>11}\n", "lab", "exercise", "tests", "score");
  for (const Score& s : scores) {
    fmt::print("{:<16} {:<40} {:>3}/{:<3} {:>5.1f}/{:<5.0f}\n", s.exercise->lab, s.exercise->name, s.passed, s.total,
               s.points, kPoints);
    total += s.points;
  }
  fmt::print("{:<16} {:<40} {:>7} {:>5.1f}/{:<5.0f}\n", "total", "", "", total, kPoints * scores.size());
}

// Gradescope's results.json (https://gradescope-autograders.readthedocs.io/en/latest/specs/),
// written to a temporary file and renamed, so a reader never sees half of one.
void write_gradescope(const fs::path& path, const std::vector<Score>& scores) {
  json tests = json::array();
  double total = 0;
  for (const Score& s : scores) {
    total += s.points;
    tests.push_back({{"name", fmt::format("{}: {}", s.exercise->lab, s.exercise->name)},
                     {"score", s.points},
                     {"max_score", kPoints},
                     {"status", s.passed == s.total ? "passed" : "failed"},
                     {"output", s.feedback.empty() ? "all checks pass" : s.feedback}});
  }
  const fs::path temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary);
    out << json{{"score", in_hundredths(total)}, {"tests", tests}}.dump(2) << '\n';
    if (!out) throw std::runtime_error(fmt::format("cannot write {}", temporary.string()));
  }
  fs::rename(temporary, path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Score the exercises: every graded test in a process of its own"};
  std::vector<std::string> labs;
  std::string gradescope;
  fs::path build_log;
  fs::path manifest = fs::path(argv[0]).parent_path() / "grade_manifest.json";
  double timeout = 10;
  int jobs = int(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("labs", labs, "labs to grade (default: every graded lab)");
  app.add_option("--timeout", timeout, "seconds each test may run")->capture_default_str()->check(cli::in_range(0.1, 3600.0));
  app.add_option("--jobs", jobs, "tests run at once (default: the number of cores)")->check(cli::in_range(1, 1024));
  app.add_option("--gradescope", gradescope, "also write Gradescope's results.json here")->check(cli::output_file());
  app.add_option("--build-log", build_log, "the build's output (if there is one), to quote an exercise's compiler errors from");
  app.add_option("--manifest", manifest, "the exercises and their grade binaries")->capture_default_str();
  cli::one_line_errors(app);
  CLI11_PARSE(app, argc, argv);

  try {
    // A results.json from an earlier run must not outlive this one, whatever happens to it.
    if (!gradescope.empty()) fs::remove(gradescope);
    const std::vector<Exercise> exercises = read_manifest(manifest, labs);
    std::vector<Test> tests;
    for (const Exercise& e : exercises) {
      // An exercise whose binary is missing or cannot even list its tests scores 0 with the reason.
      std::string broken = fs::exists(e.binary) ? "" : does_not_compile(build_log, e);
      std::vector<std::string> names;
      if (broken.empty()) try {
          names = list_tests(e, timeout);
        } catch (const std::exception& error) {
          broken = error.what();
        }
      if (!broken.empty()) names = {e.name + ".Runs"};
      for (std::string& name : names) {
        Test& t = tests.emplace_back();
        t.exercise = &e;
        t.name = std::move(name);
        t.compiled = broken.empty();
        if (!t.compiled) t.messages = {broken};
      }
    }
    std::vector<Test*> to_run;
    for (Test& t : tests)
      if (t.compiled) to_run.push_back(&t);
    run_all(to_run, jobs, timeout, isatty(STDERR_FILENO));
    const std::vector<Score> scores = score(exercises, tests);
    print_table(scores);
    if (!gradescope.empty()) write_gradescope(gradescope, scores);
    return std::all_of(tests.begin(), tests.end(), [](const Test& t) { return t.passed; }) ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
}
