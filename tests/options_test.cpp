// Bad input, named: every option of every lab and tool, fed values it must
// refuse, answers with one line that names the option and the value, and
// exits non-zero, normally (no signal, no hang).
//
// The options come from each program's --help, so a new lab or option is
// swept without editing this file. A number option states its range there
// ("--ranks INT:(1 to 1048576)=4", from labkit/cli.h): it gets a non-number,
// the values just outside the range and ones no type holds, and the error must
// quote the range. A text option gets an unknown name ("bogus"); a size
// ("TEXT:(SIZE >= 4)") also a negative, an overflowing and a too small one.
// A number option that states no range fails the sweep. The programs are
// listed in programs.txt, written by tests/CMakeLists.txt.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

namespace {

// Options whose every value is acceptable, and why.
const std::map<std::string, std::string> kAnyValue = {
    {"--output_file", "a file to write"}, {"--out", "a file to write"},     {"--screenshot", "a file to write"},
    {"--dump", "a folder to write"},     {"trace", "a trace to read; a missing one is the loader's error"},
    {"--gradescope", "a file to write"}, {"--manifest", "a file to read; a missing one is the grader's error"},
    {"--build-log", "./labkit grade's build output, to quote compile errors from; none when it is missing"}};

struct Program {
  std::string name, path;
  std::vector<std::string> args;  // what it needs to run at all (a required positional)
};

void PrintTo(const Program& p, std::ostream* out) { *out << p.name; }  // for gtest's messages

std::vector<Program> programs() {
  std::ifstream in(LABKIT_PROGRAMS);
  std::vector<Program> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    Program p;
    fields >> p.name >> p.path;
    for (std::string a; fields >> a;) p.args.push_back(a);
    out.push_back(p);
  }
  return out;
}

struct Outcome {
  bool exited = false, timed_out = false;
  int code = 0, signal = 0;
  std::string output;  // standard output and error together
};

// Runs argv[0] with a time limit, reading what it prints on either stream.
Outcome run(const std::vector<std::string>& argv, std::chrono::seconds limit = std::chrono::seconds(30)) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  Outcome o;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fds[0], POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, int(left.count())) == 0) {
      o.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    o.output.append(buf, std::size_t(n));
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  o.exited = WIFEXITED(status);
  o.code = o.exited ? WEXITSTATUS(status) : 0;
  o.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return o;
}

// What is wrong with a refusal, or "" when it is one line naming each of `words`.
std::string judge(const Outcome& o, const std::vector<std::string>& words) {
  if (o.timed_out) return "still running after 30 s: the value was taken";
  if (!o.exited) return fmt::format("killed by signal {}", o.signal);
  if (o.code == 0) return "exit status 0: the value was taken";
  if (o.output.find('\n') + 1 != o.output.size()) return "not exactly one line";
  if (!o.output.starts_with("error: ")) return "the line does not start with 'error: '";
  for (const std::string& w : words)
    if (o.output.find(w) == std::string::npos) return fmt::format("the line does not say '{}'", w);
  return "";
}

struct Option {
  std::vector<std::string> names;  // "-b", "--minbytes"; a positional's one name
  std::string type;                // INT, UINT, FLOAT or TEXT
  std::string range;               // "1 to 1048576", ">= 1", "SIZE >= 4"; "" if none stated
  bool positional = false;

  std::string name() const {  // the long name, as errors give it
    for (const std::string& n : names)
      if (n.starts_with("--")) return n;
    return names.front();
  }
};

// Every option that takes a value, read off --help: "  NAMES TYPE[:(RANGE)][=DEFAULT]  help".
std::vector<Option> options_of(const Program& p) {
  static const std::regex line(R"(^  (\S+) (INT|UINT|FLOAT|TEXT)(?=[ :=]|$)(?::\(([^)]*)\))?)");
  std::vector<Option> out;
  std::istringstream help(run({p.path, "--help"}).output);
  bool positionals = false;
  for (std::string text; std::getline(help, text);) {
    if (!text.empty() && text[0] != ' ') positionals = text == "Positionals:";
    std::smatch m;
    if (!std::regex_search(text, m, line)) continue;
    Option o{{}, m[2], m[3], positionals};
    std::istringstream names(m[1]);
    for (std::string n; std::getline(names, n, ',');) o.names.push_back(n);
    out.push_back(o);
  }
  return out;
}

std::string number(double x) { return fmt::format("{}", x); }

// Values outside the stated range: "1 to 8", ">= 1", "> 0", "> 0 and <= 1".
std::vector<std::string> outside(const std::string& range) {
  std::smatch m;
  if (std::regex_match(range, m, std::regex(R"((\S+) to (\S+))")))
    return {number(std::stod(m[1]) - 1), number(std::stod(m[2]) + 1)};
  if (std::regex_match(range, m, std::regex(R"(>= (\S+))"))) return {number(std::stod(m[1]) - 1)};
  if (std::regex_match(range, m, std::regex(R"(> (\S+) and <= (\S+))")))
    return {m[1], number(std::stod(m[1]) - 1), number(std::stod(m[2]) + 1)};
  if (std::regex_match(range, m, std::regex(R"(> (\S+))"))) return {m[1], number(std::stod(m[1]) - 1)};
  return {};
}

// The values `o` must refuse; empty if any value will do.
std::vector<std::string> bad_values(const Option& o) {
  if (kAnyValue.contains(o.name())) return {};
  // What a lab writes is refused before it runs where it cannot be written: a
  // folder, a path no one may create (a file under /proc), and for a figure a
  // format gnuplot is not asked to draw.
  if (o.name() == "--json" || o.name() == "--trace") return {::testing::TempDir(), "/proc/labkit/out.json"};
  if (o.name() == "--plot") return {::testing::TempDir(), "/proc/labkit/out.svg", "figure.jpg"};
  if (o.type == "TEXT") {
    std::vector<std::string> values = {"bogus"};
    std::smatch m;
    if (std::regex_match(o.range, m, std::regex(R"(SIZE(?: >= (\d+))?)"))) {
      values.insert(values.end(), {"-1K", "99999999999G"});
      if (m[1].matched && std::stoull(m[1]) > 0) values.push_back(std::to_string(std::stoull(m[1]) - 1));
    }
    return values;
  }
  std::vector<std::string> values = {"abc", "nan"};
  if (o.type == "FLOAT")
    values.insert(values.end(), {"inf", "1e999"});
  else
    values.insert(values.end(), {"2.5", "99999999999999999999"});
  for (const std::string& v : outside(o.range)) values.push_back(v);
  return values;
}

class Options : public ::testing::TestWithParam<Program> {};

TEST_P(Options, EveryBadValueIsRefusedOnOneLineNamingOptionAndValue) {
  const Program& p = GetParam();
  const std::vector<Option> options = options_of(p);
  ASSERT_FALSE(options.empty()) << p.path << " --help lists no options";
  int tried = 0;
  for (const Option& o : options) {
    if (o.type != "TEXT" && outside(o.range).empty()) {
      ADD_FAILURE() << p.name << " " << o.name() << " " << o.type << " states no range in --help (use a check "
                    << "from labkit/cli.h)";
      continue;
    }
    for (const std::string& value : bad_values(o)) {
      // A positional takes the place of the arguments that satisfy it.
      std::vector<std::string> argv = {p.path};
      if (o.positional) {
        argv.push_back(value);
      } else {
        argv.insert(argv.end(), p.args.begin(), p.args.end());
        argv.push_back(o.name() + "=" + value);
      }
      std::vector<std::string> words = {o.name(), value};
      if (o.type != "TEXT") words.push_back("(must be " + o.range);  // then ")", or ", at most" the type's top
      const Outcome got = run(argv);
      const std::string wrong = judge(got, words);
      EXPECT_EQ(wrong, "") << fmt::format("{}", fmt::join(argv, " ")) << "\n  printed: " << got.output;
      ++tried;
    }
  }
  EXPECT_GT(tried, 0);
}

INSTANTIATE_TEST_SUITE_P(EveryLabAndTool, Options, ::testing::ValuesIn(programs()),
                         [](const auto& info) {  // a test name has no '-': labkit-viz is labkit_viz
                           return std::regex_replace(info.param.name, std::regex("-"), "_");
                         });

// Mistakes no single option shows: a value that does not fit the others, or a
// file with a bad field. Each is refused on one line, before anything runs.
TEST(Options, MistakesAcrossOptionsAreRefusedOnOneLine) {
  std::map<std::string, std::string> path;
  for (const Program& p : programs()) path[p.name] = p.path;
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "options_test";
  std::filesystem::create_directories(dir);
  auto topology = [&](const std::string& name, const std::string& json) {
    std::ofstream((dir / name).string()) << json;
    return (dir / name).string();
  };
  const std::string link = R"({"alpha_us": 2, "bandwidth_GBps": 10})";
  const std::string zero_bandwidth = topology(
      "zero_bandwidth.json", R"({"devices_per_node": 2, "intra": )" + link +
                                 R"(, "inter": {"alpha_us": 2, "bandwidth_GBps": 0}})");
  const std::string negative_alpha = topology(
      "negative_alpha.json", R"({"devices_per_node": 2, "inter": )" + link +
                                 R"(, "intra": {"alpha_us": -1, "bandwidth_GBps": 10}})");
  const std::string no_devices =
      topology("no_devices.json", R"({"devices_per_node": 0, "intra": )" + link + R"(, "inter": )" + link + "}");
  const std::string missing = topology("missing_field.json", R"({"devices_per_node": 2, "intra": )" + link + "}");

  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"memory", "--tp", "3"}, {"--tp 3", "attention heads", "divide 32 (1, 2, 4, 8, 16, 32)"}},
      {{"memory", "--model", "gpt2-xl", "--tp", "2"}, {"--tp 2", "25"}},
      {{"memory", "--pp", "33"}, {"--pp 33", "32 layers"}},
      {{"memory", "--dp", "8", "--hsdp", "3"}, {"--hsdp 3", "--dp 8"}},
      {{"memory", "--plot", "zero.svg"}, {"--plot zero.svg", "--sweep zero"}},
      {{"memory", "--inference", "--sweep", "zero"}, {"--sweep zero", "training"}},
      {{"collectives", "--straggler", "9:0.5"}, {"--straggler 9:0.5", "4 ranks"}},
      {{"collectives", "--op", "broadcast", "--root", "7"}, {"root=7", "4 ranks"}},
      {{"collectives", "--topology", zero_bandwidth}, {"--topology", zero_bandwidth, "inter.bandwidth_GBps = 0"}},
      {{"collectives", "--topology", negative_alpha}, {"--topology", negative_alpha, "intra.alpha_us = -1"}},
      {{"collectives", "--topology", no_devices}, {"--topology", no_devices, "devices_per_node = 0"}},
      {{"collectives", "--topology", missing}, {"--topology", missing, "inter.alpha_us is missing"}},
      {{"ring_allreduce", "--compare", "-b", "1M", "-e", "1K"}, {"--minbytes 1M", "--maxbytes 1K"}},
      {{"bench_collective", "all_reduce", "-b", "1M", "-e", "1K"}, {"--minbytes 1M", "--maxbytes 1K"}},
      {{"bench_collective", "broadcast", "--algos", "ring"}, {"--algos", "broadcast", "'ring'"}},
      {{"bench_collective", "all_reduce", "--algos", "baseline"}, {"--algos baseline", "--backend mpi"}},
      {{"calibrate", "--algos", "ring", "--use", "binomial_tree"}, {"--use binomial_tree", "--algos"}},
      {{"calibrate", "--check", "1M"}, {"--check 1M", "--maxbytes 64M"}},
      {{"calibrate", "--latency-below", "512"}, {"--latency-below 512", "--minbytes 1K"}},
      // A flag that would do nothing where it is given, refused with the reason.
      {{"moe", "--compare", "--balance", "bias"}, {"--balance bias", "--compare", "every way of balancing"}},
      {{"moe", "--balance", "none", "--alpha", "0.5"}, {"--alpha 0.5", "--balance aux", "balances by none"}},
      {{"moe", "--balance", "aux", "--gamma", "0.01"}, {"--gamma 0.01", "--balance bias", "balances by aux"}},
      {{"pipeline", "--times", "2:1:1"}, {"--times 2:1:1", "--compare"}},
      {{"fsdp", "--stage", "1", "--reshard-after-forward", "off"}, {"--reshard-after-forward off", "only stage 3"}},
      {{"fsdp", "--what-if", "llama2-7b", "--reshard-after-forward", "off"},
       {"--reshard-after-forward off", "--what-if"}},
      {{"memory", "--sp"}, {"--sp", "--tp 1"}},
      {{"memory", "--inference", "--timeline"}, {"--timeline", "training step", "--inference"}},
      {{"memory", "--inference", "--zero", "3"}, {"--zero 3", "--inference"}},
      // Refused even when spelled as the default is: an explicit option is never silently overridden.
      {{"memory", "--autocast", "--precision", "bf16"}, {"--autocast", "drop --precision"}},
      {{"train", "--ranks", "2"}, {"--ranks 2", "one model on one rank"}},
      {{"tp", "--what-if", "gpt3-175b", "--sp"}, {"--sp", "--what-if"}},
      // The option at fault, not another: the what-if sizes GPT-3, not the tiny GPT's 4 heads; the
      // interleaved schedule's default V, not a --virtual never given; --seq a whole number of tokens.
      {{"tp", "--what-if", "gpt3-175b", "--ranks", "8"}, {"--ranks 8", "--what-if does not read it: it times its layer"}},
      {{"pipeline", "--schedule", "interleaved", "--stages", "3", "--layers", "9", "--microbatches", "3"},
       {"--schedule interleaved: a stage's 3 layers", "2 equal chunks", "by default (--virtual)"}},
      {{"fsdp", "--what-if", "llama2-7b", "--seq", "1.5"}, {"--seq", "1.5 is not a whole number", "(must be 1 to"}},
      {{"fsdp", "--what-if", "llama2-7b", "--seq", "1e19"}, {"--seq", "1e19", "(must be 1 to"}},
  };
  for (const auto& [args, words] : cases) {
    ASSERT_TRUE(path.contains(args[0])) << args[0] << " is not in " << LABKIT_PROGRAMS;
    std::vector<std::string> argv = args;
    argv[0] = path[args[0]];
    const Outcome got = run(argv);
    EXPECT_EQ(judge(got, words), "") << fmt::format("{}", fmt::join(args, " ")) << "\n  printed: " << got.output;
  }
}

}  // namespace
