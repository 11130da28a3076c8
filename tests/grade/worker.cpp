#include "worker.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <time.h>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "sim/engine.h"

namespace labkit::grade {

namespace {
std::FILE* report = nullptr;  // the trail (--report); null when run by hand or by CTest
std::mutex report_lock;       // the watchdog thread writes too
std::atomic<sim::Engine*> watched{nullptr};
std::string configuration;

void write_line(const nlohmann::json& line) {
  if (!report) return;
  std::lock_guard lock(report_lock);
  std::fputs((line.dump() + "\n").c_str(), report);
  std::fflush(report);
}

// ---- a crash: say which signal and which rank, then die of it ----------------
// Only async-signal-safe calls here: the heap may be what the learner broke.

void write_all(int fd, const char* text) {
  for (std::size_t left = std::strlen(text); left > 0;) {
    const ssize_t n = ::write(fd, text, left);
    if (n <= 0) return;
    text += n;
    left -= std::size_t(n);
  }
}

void on_crash(int signal) {
  const sim::Engine* engine = watched.load();
  const int rank = engine ? engine->running() : -1;
  char digits[16] = "-1";
  if (rank >= 0) {
    char reversed[16];
    int n = 0;
    for (int r = rank; n == 0 || r > 0; r /= 10) reversed[n++] = char('0' + r % 10);
    for (int i = 0; i < n; ++i) digits[i] = reversed[n - 1 - i];
    digits[n] = '\0';
  }
  if (report) {
    const int fd = fileno(report);
    write_all(fd, "{\"crash\": \"");
    write_all(fd, sigabbrev_np(signal));
    write_all(fd, "\", \"rank\": ");
    write_all(fd, digits);
    write_all(fd, "}\n");
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

void catch_crashes() {
  // Its own stack: a learner's runaway recursion has used up the one it had.
  static char stack[64 * 1024];
  stack_t alt{};
  alt.ss_sp = stack;
  alt.ss_size = sizeof stack;
  sigaltstack(&alt, nullptr);
  struct sigaction action{};
  action.sa_handler = on_crash;
  action.sa_flags = SA_ONSTACK;
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(s, &action, nullptr);
}

// ---- an endless loop: after the time limit, say what every rank was doing ----
// The limit counts the process's CPU time, not the wall clock: a machine busy
// with other work stretches the wall clock of a right answer, not its work,
// while an endless loop spends CPU at full rate. A wall-clock cap (kWallClockCap
// times the limit) still catches code that sleeps. A loop that keeps calling
// the simulator (sending and receiving without end) is reported from inside
// it, at its next call (Engine::interrupt); one that never calls it again runs
// its own code, and the watchdog reads the engine from its own thread: the
// engine's state does not change until that rank calls into it again.
constexpr int kExitTimedOut = 3;
constexpr auto kAnswerWithin = std::chrono::milliseconds(500);  // a rank that still calls the engine does by then

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

void start_watchdog(double seconds) {
  std::thread([seconds] {
    const auto started = std::chrono::steady_clock::now();
    while (cpu_seconds() < seconds &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() < kWallClockCap * seconds)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    sim::Engine* engine = watched.load();
    const std::string limit = fmt::format("still running after {:g} s", seconds);
    if (engine) {
      engine->interrupt([engine, limit] {
        write_line({{"timeout", fmt::format("{}: rank {} keeps calling the simulator without end (a loop whose "
                                            "bound is never reached?)\n{}", limit, engine->running(),
                                            engine->rank_states())}});
        std::_Exit(kExitTimedOut);
      });
      std::this_thread::sleep_for(kAnswerWithin);
      if (!engine->cancel_interrupt()) std::this_thread::sleep_for(std::chrono::hours(1));  // it is answering
    }
    std::string what = limit;
    if (engine) {
      const int rank = engine->running();
      what += rank >= 0 ? fmt::format(": rank {} never came back to the simulator (an endless loop in its own code?)",
                                      rank)
                        : ": the simulated ranks were not running";
      what += '\n';
      what += engine->rank_states();
    }
    write_line({{"timeout", what}});
    std::_Exit(kExitTimedOut);
  }).detach();
}

// ---- the outcome of each test -------------------------------------------------

class Reporter : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    nlohmann::json messages = nlohmann::json::array();
    for (int i = 0; i < info.result()->total_part_count(); ++i) {
      const ::testing::TestPartResult& part = info.result()->GetTestPartResult(i);
      if (!part.failed()) continue;
      std::string message = part.message();  // ADD_FAILURE() starts it with "Failed\n"
      if (message.starts_with("Failed\n")) message.erase(0, 7);
      messages.push_back(message);
    }
    watched = nullptr;
    write_line({{"test", fmt::format("{}.{}", info.test_suite_name(), info.name())},
                {"passed", info.result()->Passed()},
                {"messages", messages}});
  }
};

// Takes "--NAME VALUE" out of argv (gtest would complain of it), or "".
std::string take_option(int& argc, char** argv, std::string_view name) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name) {
      std::string value = argv[i + 1];
      for (int j = i; j + 2 <= argc; ++j) argv[j] = argv[j + 2];
      argc -= 2;
      return value;
    }
  return "";
}
}  // namespace

void watch(sim::Engine* engine) { watched = engine; }

void at_configuration(std::string_view label) {
  configuration = label;
  write_line({{"config", configuration}});
}

void mark_pattern_test() { write_line({{"pattern", true}}); }

int main(int argc, char** argv) {
  const std::string report_path = take_option(argc, argv, "--report");
  const std::string timeout = take_option(argc, argv, "--timeout");
  ::testing::InitGoogleTest(&argc, argv);
  if (!report_path.empty()) {
    report = std::fopen(report_path.c_str(), "a");
    if (!report) {
      fmt::print(stderr, "grade: cannot write the report {}\n", report_path);
      return 2;
    }
    ::testing::UnitTest::GetInstance()->listeners().Append(new Reporter);  // the list owns it
    catch_crashes();
  }
  if (!timeout.empty()) start_watchdog(std::stod(timeout));
  return RUN_ALL_TESTS();
}

}  // namespace labkit::grade
