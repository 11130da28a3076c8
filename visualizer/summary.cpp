// What the summary panel shows, computed once per trace rather than every
// frame: each rank's time split into communicating, computing and idle, the
// communication its stream hid under compute, and the bytes each link carried;
// and a pipeline step's cells, read back from its compute spans' names.
#include "summary.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

namespace viz {

namespace {
using Intervals = std::vector<std::pair<double, double>>;  // (start, end), seconds

// The same time, each instant once: sorted, overlapping intervals joined.
Intervals merged(Intervals v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (const auto& [start, end] : v)
    if (!out.empty() && start <= out.back().second) out.back().second = std::max(out.back().second, end);
    else out.push_back({start, end});
  return out;
}
double length(const Intervals& v) {
  double total = 0;
  for (const auto& [start, end] : v) total += end - start;
  return total;
}
// What of [0, end) a merged set leaves out.
Intervals gaps(const Intervals& v, double end) {
  Intervals out;
  double from = 0;
  for (const auto& [start, stop] : v) {
    if (start > from) out.push_back({from, start});
    from = std::max(from, stop);
  }
  if (end > from) out.push_back({from, end});
  return out;
}
// The time two merged sets share, walking both in order.
double overlap(const Intervals& a, const Intervals& b) {
  double total = 0;
  for (std::size_t i = 0, j = 0; i < a.size() && j < b.size(); a[i].second < b[j].second ? ++i : ++j)
    total += std::max(0.0, std::min(a[i].second, b[j].second) - std::max(a[i].first, b[j].first));
  return total;
}
bool is_communication(Kind k) { return k == Kind::collective || k == Kind::send || k == Kind::recv; }

// A message travels from when both its ends are posted until it is
// delivered: a send or a receive posted before the other waits on the peer,
// not on the network, and a send's request may be waited for long after its
// delivery. Those waits are idle (a pipeline's bubble, ring attention's
// imbalance), not communication. By span: its message's travel.
std::map<const Span*, std::pair<double, double>> travels(const TraceModel& m) {
  std::map<const Span*, std::pair<double, double>> of;
  for (const Flow& f : m.flows) {
    const Track& to = m.tracks[std::size_t(f.to_track)];
    const Span* send = span_holding(m.tracks[std::size_t(f.from_track)], f.sent, Kind::send);
    // The receive the delivery ends: it holds the instant before (a ring's next
    // receive starts at the delivery), or, posted after it, the delivery alone.
    const Span* recv = span_holding(to, std::nextafter(f.delivered, -INFINITY), Kind::recv);
    if (!recv) recv = span_holding(to, f.delivered, Kind::recv);
    if (!send || !recv) continue;
    of[send] = of[recv] = {std::max(send->start, recv->start), f.delivered};
  }
  return of;
}

// Whether a collective span holds sends or receives of the track's: labkit's
// algorithm over point-to-point, whose messages count as they travel. The
// backend's own collective holds none, and counts whole.
bool runs_as_messages(const Track& t, const Span& collective) {
  auto it = std::lower_bound(t.spans.begin(), t.spans.end(), collective.start,
                             [](const Span& s, double start) { return s.start < start; });  // spans sorted by start
  for (; it != t.spans.end() && it->start <= collective.end; ++it)
    if ((it->kind == Kind::send || it->kind == Kind::recv) && it->end <= collective.end) return true;
  return false;
}
}  // namespace

// Each rank's time splits three ways that add up to the run: computing,
// communicating and idle. Communication counts only while the rank is not
// computing (in a blocking collective, or waiting for one still in flight on
// its stream): the *exposed* communication the training labs measure, the time
// overlap sets out to remove. A message counts while it travels (travels()):
// waiting for the peer is idle, inside labkit's collectives too. Communication
// in flight while the rank computes costs it nothing; it is reported apart, as
// hidden, so the table shows what overlap saved rather than a rank busy for
// more than 100% of the run.
Summary summarize(const TraceModel& m) {
  Summary s;
  std::vector<Intervals> compute_spans(m.ranks), comm_spans(m.ranks);  // by rank, its stream's included
  const std::map<const Span*, std::pair<double, double>> messages = travels(m);
  for (const Track& t : m.tracks) {
    s.streams = s.streams || t.stream;
    for (const Span& span : t.spans) {
      if (span.kind == Kind::compute) compute_spans[t.rank].push_back({span.start, span.end});
      if (const auto cell = span.kind == Kind::compute ? pipeline_cell(span.name) : std::nullopt)
        s.pipeline_microbatches = std::max(s.pipeline_microbatches, cell->microbatch + 1);
      if (!is_communication(span.kind)) continue;
      if (span.kind == Kind::collective) {
        if (runs_as_messages(t, span)) continue;
        s.native_collectives = true;
      }
      const auto message = messages.find(&span);
      comm_spans[t.rank].push_back(message == messages.end() ? std::pair{span.start, span.end} : message->second);
    }
  }
  const double end = std::max(m.end, 1e-300);
  for (int r = 0; r < m.ranks; ++r) {
    const Intervals compute = merged(compute_spans[r]), comm = merged(comm_spans[r]);
    const double hidden = overlap(compute, comm);
    const double exposed = (length(comm) - hidden) / end, busy = length(compute) / end;
    Intervals either = compute;
    either.insert(either.end(), comm.begin(), comm.end());
    s.ranks.push_back({exposed, busy, std::max(0.0, 1 - exposed - busy), hidden / end, gaps(merged(either), m.end)});
  }
  std::map<std::pair<int, int>, std::int64_t> per_link;
  for (const Flow& f : m.flows) per_link[{f.from_rank, f.to_rank}] += f.bytes;
  for (const auto& [link, bytes] : per_link) s.links.push_back({bytes, link});
  std::sort(s.links.rbegin(), s.links.rend());
  return s;
}

std::optional<PipelineCell> pipeline_cell(std::string_view name) {
  PipelineCell cell{PipelineCell::Kind::backward, 0, name.ends_with('\'')};
  if (cell.later_chunk) name.remove_suffix(1);
  const std::size_t space = name.rfind(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::string_view kind = name.substr(0, space), number = name.substr(space + 1);
  const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), cell.microbatch);
  if (error != std::errc() || end != number.data() + number.size() || cell.microbatch < 0) return std::nullopt;
  if (kind == "forward") cell.kind = PipelineCell::Kind::forward;
  else if (kind == "backward for the weights") cell.kind = PipelineCell::Kind::weights;
  else if (kind != "backward" && kind != "backward for the input") return std::nullopt;
  return cell;
}

}  // namespace viz
