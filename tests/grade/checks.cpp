#include "checks.h"

#include <algorithm>
#include <bit>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "labkit/algorithms.h"
#include "labkit/error.h"
#include "labkit/topology.h"
#include "sim/engine.h"
#include "worker.h"

namespace labkit::grade {

std::vector<float> inputs(int rank, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = input(rank, i);
  return v;
}

std::string first_mismatch(const Buffers& got, std::size_t n, const std::function<float(int, std::size_t)>& expected,
                           std::size_t block) {
  for (int r = 0; r < int(got.size()); ++r)
    for (std::size_t i = 0; i < n; ++i)
      if (i >= got[r].size() || got[r][i] != expected(r, i)) {
        const std::string where = block ? fmt::format(" (block {}, element {} of it)", i / block, i % block) : "";
        return fmt::format("rank {}, element {}{}: expected {}, got {}", r, i, where, expected(r, i),
                           i < got[r].size() ? fmt::format("{}", got[r][i]) : "nothing");
      }
  return "";
}

// ---- a watched run --------------------------------------------------------------

std::vector<Posted> Observed::sends(int rank) const { return posted_by(rank, true); }
std::vector<Posted> Observed::recvs(int rank) const { return posted_by(rank, false); }

std::vector<Posted> Observed::posted_by(int rank, bool is_send) const {
  std::vector<Posted> out;
  for (const Posted& p : posted[rank])
    if (p.is_send == is_send) out.push_back(p);
  return out;
}

namespace {
// What a learner should try when the simulator stopped the run.
std::string hint_for(const std::string& error) {
  // The simulator's report ends with the wait-for cycle, or says there is none (engine.cpp, deadlock_report).
  if (error.starts_with("deadlock") && error.find("no wait-for cycle") != std::string::npos)
    return "\nHint: a rank returned while another still waits for its message: every send needs its receive on "
           "the peer, at every P and every rank (a loop bound or an `if` that lets a rank skip its part?).";
  if (error.starts_with("deadlock"))
    return "\nHint: a blocking send returns only once its receive is posted, and a receive once its message has "
           "come, so two ranks that both send first, or both receive first, wait for each other; exchange with "
           "sendrecv (or isend/irecv, then wait).";
  // Messages between two ranks on one tag match in the order posted, whatever their size.
  if (error.find("but the receive buffer holds") != std::string::npos)
    return "\nHint: a receive takes the first message from its peer with its tag, so sender and receiver must agree "
           "on what moves in which order: the same chunk index on both sides (chunks differ in size when the count "
           "does not divide by P), and a tag of its own for each of two messages in flight between the same ranks.";
  if (error.find("is out of range for") != std::string::npos)
    return "\nHint: a peer is a rank from 0 to P-1: compute neighbours and partners mod P, and check the rank "
           "count your formula assumes (a power of two?).";
  if (error.find("is this rank itself") != std::string::npos)
    return "\nHint: a rank never messages itself; copy locally instead (copy_local), and at P=1 there is nothing to "
           "send.";
  return "";
}

// A grade run carries payloads, so a view with a count and no data (an empty
// std::vector's data() is null) would move nothing where the simulator's
// payload-free runs move sizes only: the learner's values come out wrong with
// no word of why. (Labs time meta views' messages inside payload runs, so the
// simulator itself lets them through.)
void check_has_data(int rank, bool is_send, int peer, View buf) {
  if (buf.data || buf.count == 0) return;
  fail(fmt::format("rank {}", rank), is_send ? fmt::format("send(to={})", peer) : fmt::format("recv(from={})", peer),
       "the {} buffer is a null pointer with a count of {} ({}): it holds no memory, so nothing {}; {} a buffer of "
       "that many elements (an empty std::vector's data() is null: size it first)",
       is_send ? "send" : "receive", buf.count, name_of(buf.dtype), is_send ? "is sent" : "lands",
       is_send ? "send from" : "receive into");
}
}  // namespace

std::string native_called(const Observed& run) {
  if (run.native.empty()) return "";
  return fmt::format("calls comm.{}: that is a native collective, and this exercise must be built from "
                     "point-to-point (send, recv, sendrecv) — it earns nothing while it calls one",
                     run.native);
}

std::string run_problem(const Observed& run) {
  if (!run.native.empty()) return native_called(run);
  return run.error;
}

Observed run_ranks(int p, const std::function<void(Comm&)>& fn, const std::string& topology) {
  Observed run;
  run.trace = std::make_unique<Trace>(p);
  run.posted.resize(p);
  sim::Engine engine({.ranks = p,
                      .topology = find_topology(topology),
                      .trace = run.trace.get(),
                      .on_post = [&](int rank, bool is_send, int peer, View buf) {
                        run.posted[rank].push_back({is_send, peer, buf});
                        check_has_data(rank, is_send, peer, buf);
                      }});
  watch(&engine);
  try {
    engine.run(fn);
  } catch (const std::exception& e) {
    run.error = e.what() + hint_for(e.what());
  }
  watch(nullptr);
  run.elapsed = engine.elapsed();
  for (const TraceTrack& track : run.trace->tracks())
    for (const TraceEvent& e : track.events)
      if (e.kind == TraceEvent::Kind::collective && run.native.empty()) run.native = e.name;
  return run;
}

int chunk_index(const void* base, std::size_t count, int parts, const View& buf) {
  const auto* start = static_cast<const std::byte*>(base);
  const auto* at = static_cast<const std::byte*>(buf.data);
  for (int i = 0; i < parts; ++i) {
    const Chunk c = chunk_range(count, parts, i);
    if (at == start + c.offset * size_of(buf.dtype) && buf.count == c.count) return i;
  }
  return -1;
}

// ---- Sweep ----------------------------------------------------------------------

Sweep::Sweep(std::string exercise, Checks checks) : exercise_(std::move(exercise)) {
  if (checks == Checks::pattern) mark_pattern_test();
}

void Sweep::check(const Config& config, const std::function<std::string()>& check) {
  at_configuration(fmt::format("{}, {}", exercise_, config.label));
  std::string wrong;
  try {
    wrong = check();
  } catch (const std::exception& e) {
    wrong = fmt::format("threw an exception: {}", e.what());
  }
  if (wrong.empty()) passed_.push_back(config);
  else failed_.emplace_back(config, std::move(wrong));
}

namespace {
struct Shared {
  std::string failing, passing;  // "the ones that are not powers of two", "the others"
  std::function<bool(const Config&)> holds;
};

// The property that exactly the failing configurations share, if one does.
// Only a contrast names one: with nothing passing, every property of the
// configurations tried (their count, their root) holds of the failures alone
// by default. The rank count is asked first, since a P that always fails
// explains the counts tried with it; and P = 1 (where nothing is sent) passes
// too much wrong code to be the only contrast for a property of P.
std::string what_failures_share(const std::vector<std::pair<Config, std::string>>& failed,
                                const std::vector<Config>& passed) {
  std::set<int> failing_p, passing_p;
  for (const auto& [c, _] : failed) failing_p.insert(c.p);
  for (const Config& c : passed) passing_p.insert(c.p);
  if (failing_p.count(0)) return "";  // not a communication exercise
  if (passed.empty()) return fmt::format("fails at every P tried ({})", fmt::join(failing_p, ", "));
  const bool p_decides = std::none_of(failing_p.begin(), failing_p.end(), [&](int p) { return passing_p.count(p); });
  for (int p : failing_p) passing_p.erase(p);

  const Shared by_p[] = {
      {"the ones that are not powers of two", "", [](const Config& c) { return !std::has_single_bit(unsigned(c.p)); }},
      {"the powers of two", "", [](const Config& c) { return std::has_single_bit(unsigned(c.p)); }},
      {"the odd ones", "", [](const Config& c) { return c.p % 2 == 1; }},
      {"the even ones", "", [](const Config& c) { return c.p % 2 == 0; }},
      {"more than one node of 8", "", [](const Config& c) { return c.p > 8; }}};
  std::string share;
  if (!passing_p.empty() && *passing_p.rbegin() > 1)
    for (const Shared& s : by_p) {
      auto holds = [&](int p) { return s.holds(Config{.p = p, .label = "", .root = -1}); };
      if (std::all_of(failing_p.begin(), failing_p.end(), holds) &&
          std::none_of(passing_p.begin(), passing_p.end(), holds)) {
        share = fmt::format(" ({})", s.failing);
        break;
      }
    }
  const std::string by_rank_count = fmt::format("fails at P = {}{}; passes at P = {}", fmt::join(failing_p, ", "),
                                                share, fmt::join(passing_p, ", "));
  if (p_decides) return by_rank_count;

  const Shared by_count[] = {
      {"where the count does not divide by P", "where it does", [](const Config& c) { return c.count % c.p != 0; }},
      {"where the count is smaller than P", "where it is not",
       [](const Config& c) { return c.count < std::size_t(c.p); }},
      {"where the root is not rank 0", "where it is", [](const Config& c) { return c.root > 0; }}};
  for (const Shared& s : by_count) {
    const bool exact = std::all_of(failed.begin(), failed.end(), [&](auto& f) { return s.holds(f.first); }) &&
                       std::none_of(passed.begin(), passed.end(), s.holds);
    if (exact) return fmt::format("fails {} ({} of {} configurations); passes {}", s.failing, failed.size(),
                                  failed.size() + passed.size(), s.passing);
  }
  if (passing_p.empty())
    return fmt::format("fails in {} of {} configurations, at every P tried ({})", failed.size(),
                       failed.size() + passed.size(), fmt::join(failing_p, ", "));
  return by_rank_count;
}
}  // namespace

void Sweep::report(const std::string& hint) const {
  if (failed_.empty()) return;
  std::string out;
  if (const std::string shared = what_failures_share(failed_, passed_); !shared.empty()) out += shared + ".\n";
  // The first failure at each P (a learner fixes the smallest case first), three at most.
  std::set<int> ranks_shown;
  // A hint a failure carries (a deadlock's) is the same at every P: it is said once, after them.
  std::vector<std::string> hints;
  std::size_t shown = 0;
  for (const auto& [config, wrong] : failed_) {
    if (shown == 3) break;
    if (config.p && !ranks_shown.insert(config.p).second) continue;
    out += config.label + ": ";
    std::istringstream lines(wrong);
    for (std::string line; std::getline(lines, line);)
      if (!line.starts_with("Hint: ")) out += line.empty() ? "" : line + "\n";
      else if (std::find(hints.begin(), hints.end(), line) == hints.end()) hints.push_back(line);
    ++shown;
  }
  if (failed_.size() > shown) out += fmt::format("({} failing configurations in all)\n", failed_.size());
  if (!hint.empty()) hints.push_back("Hint: " + hint);
  ADD_FAILURE() << out << fmt::format("{}", fmt::join(hints, "\n"));
}

}  // namespace labkit::grade
