// Lab 7: one layer's f and g as the run executed them. Megatron's two
// operators sit at four places in every layer; each is the identity in one
// pass and a collective in the other (with sequence parallelism, a collective
// in both). Read from rank 0's trace of the first step: the collectives of
// layer 0's forward and backward, matched in order to those places.
#include <algorithm>

#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/lab/plot.h"
#include "labkit/lab/table.h"
#include "labkit/units.h"
#include "tp.h"

namespace tp_lab {

namespace {

struct Place {
  const char* pass;
  const char* op;     // Megatron's operator
  const char* where;
  const char* plain;  // the collective without sequence parallelism (null: the identity)
  const char* sp;     // and with it
  const char* before; // the compute region it runs right before, in layer 0
};

// A layer's f and g in the order they run: forward, then backward (the MLP's
// first). Without sequence parallelism the column-parallel layers keep their
// whole input for backward; with it they keep their rows and gather again.
constexpr Place kPlaces[] = {
    {"forward", "f", "before QKV (column-parallel)", nullptr, "all_gather", "column-parallel forward"},
    {"forward", "g", "after attention's projection (row-parallel)", "all_reduce", "reduce_scatter",
     "forward block 0 ln2"},
    {"forward", "f", "before the MLP's fc (column-parallel)", nullptr, "all_gather", "column-parallel forward"},
    {"forward", "g", "after the MLP's proj (row-parallel)", "all_reduce", "reduce_scatter", nullptr},
    {"backward", "g", "into the MLP's proj", nullptr, "all_gather", "backward block 0 mlp"},
    {"backward", "f", "fc's input again, for its weight gradient", nullptr, "all_gather", "column-parallel backward"},
    {"backward", "f", "out of fc, the input's gradient", "all_reduce", "reduce_scatter", "backward block 0 ln2"},
    {"backward", "g", "into attention's projection", nullptr, "all_gather", "backward block 0 attention"},
    {"backward", "f", "QKV's input again, for its weight gradient", nullptr, "all_gather", "column-parallel backward"},
    {"backward", "f", "out of QKV, the input's gradient", "all_reduce", "reduce_scatter", nullptr},
};

// What a compute region of layer 0 computes, for the picture: the layer's
// names for the exercise functions' regions (QKV then fc are the
// column-parallel layers, attention's projection then the MLP's the
// row-parallel ones), the block's own regions without "forward block 0".
std::string step_name(const std::string& region, const char* pass, int column, int row) {
  const bool forward = std::string_view(pass) == "forward";
  if (region == "column-parallel forward" || region == "column-parallel backward")
    return (forward == (column == 0) ? "QKV" : "fc") + std::string(" (column)");
  if (region == "row-parallel forward") return row == 0 ? "attn proj (row)" : "mlp proj (row)";
  const std::size_t block = region.find("block 0 ");
  const std::string part = block == std::string::npos ? region : region.substr(block + 8);
  if (!forward && part == "mlp") return "mlp proj, gelu";
  if (!forward && part == "attention") return "attn proj, attention";
  return part;
}

// Where rank 0's compute region `name` is in its events, from `from` on.
std::size_t index_of(const TraceTrack& track, const std::string& name, std::size_t from) {
  for (std::size_t i = from; i < track.events.size(); ++i)
    if (track.events[i].kind == TraceEvent::Kind::compute && track.events[i].name == name) return i;
  throw Error(fmt::format("tp: no compute region '{}' in rank 0's trace", name));
}

}  // namespace

LayerTraffic layer_traffic(const TraceTrack& track, bool sp, double step_start) {
  // Rank 0's events run one after another, in order: layer 0's forward from
  // its ln1 up to layer 1's, its backward after layer 1's ln1 up to its own.
  std::size_t first = 0;
  while (first < track.events.size() && track.events[first].start < step_start) ++first;
  const std::size_t forward_from = index_of(track, "forward block 0 ln1", first);
  const std::size_t forward_to = index_of(track, "forward block 1 ln1", forward_from);
  const std::size_t backward_from = index_of(track, "backward block 1 ln1", forward_to) + 1;
  const std::size_t backward_to = index_of(track, "backward block 0 ln1", backward_from) + 1;
  LayerTraffic out;
  std::size_t next = 0;  // the next of kPlaces
  int columns = 0, rows = 0;
  const auto place = [&](const TraceEvent* e, const char* pass) {
    if (next == std::size(kPlaces)) throw Error("tp: layer 0 ran collectives beyond Megatron's f and g");
    const Place& p = kPlaces[next++];
    const char* expected = sp ? p.sp : p.plain;
    if (std::string_view(p.pass) != pass || (e ? e->name != (expected ? expected : "") : expected != nullptr))
      throw Error(fmt::format("tp: layer 0's {} in rank 0's trace does not run {} {} {}", p.pass,
                              expected ? expected : "the identity", p.op, p.where));
    LayerPlace row;
    row.pass = p.pass, row.op = p.op, row.where = p.where;
    if (e) row.collective = e->name, row.bytes = double(e->bytes), row.seconds = e->end - e->start;
    out.places.push_back(row);
    out.steps.push_back({p.pass, fmt::format("{}: {}", p.op, e ? e->name : "identity"), p.op});
  };
  for (std::size_t i = forward_from; i < backward_to; ++i) {
    if (i == forward_to) i = backward_from, columns = rows = 0;
    const TraceEvent& e = track.events[i];
    const char* pass = i < forward_to ? "forward" : "backward";
    if (e.kind == TraceEvent::Kind::collective) place(&e, pass);
    if (e.kind != TraceEvent::Kind::compute) continue;
    // An identity has no event: it sits right before the region its place names.
    if (next < std::size(kPlaces) && !(sp ? kPlaces[next].sp : kPlaces[next].plain) && kPlaces[next].before &&
        e.name == kPlaces[next].before)
      place(nullptr, pass);
    out.steps.push_back({pass, step_name(e.name, pass, columns, rows), ""});
    columns += e.name.starts_with("column-parallel");
    rows += e.name.starts_with("row-parallel");
  }
  if (next != std::size(kPlaces)) throw Error("tp: layer 0 ran fewer f and g than Megatron's");
  return out;
}

void plot_layer(const LayerTraffic& layer, int ranks, bool sp, const std::string& path) {
  // x: the step's order in its pass; y: forward on top; colour: compute 0, f 1, g 2, an identity 3.
  std::string data;
  std::size_t forward = 0, backward = 0, place = 0;
  for (const LayerStep& step : layer.steps) {
    std::size_t& x = step.pass == "forward" ? forward : backward;
    data += fmt::format("{} {} {} \"{}\"\n", x++, step.pass == "forward" ? 1 : 0,
                        step.op.empty() ? 0 : !layer.places[place].collective.empty() ? (step.op == "f" ? 1 : 2) : 3,
                        step.label);
    if (!step.op.empty()) ++place;
  }
  const std::size_t widest = std::max(forward, backward);  // steps in the longer pass
  lab::plot(path, {.width = 1100, .height = 420, .font = 9}, data, fmt::format(
      "set title \"layer 0 of the tiny GPT on {} tensor-parallel ranks{}, rank 0, in the order it ran: compute (grey), "
      "Megatron's f (green) and g (orange), an identity (white)\"\n"
      "set yrange [-0.6:1.6]\nset xrange [-0.6:{}]\nunset xtics\nset ytics ('backward' 0, 'forward' 1)\n"
      "set cbrange [-0.5:3.5]\nunset colorbox\nset palette maxcolors 4\n"
      "set palette defined (0 '#cccccc', 1 '#1b9e77', 2 '#d95f02', 3 '#ffffff')\n"
      "plot $data using 1:2:(0.45):(0.4):3 with boxxyerror fs solid 0.9 border rgb '#444444' lc palette notitle, "
      "'' using 1:2:4 with labels rotate by 90 font 'sans,8' notitle\n",
      ranks, sp ? ", sequence parallel" : "", double(widest) - 0.4));
}

nlohmann::json print_layer_traffic(const std::vector<LayerPlace>& places) {
  fmt::print("layer 0 of the first step, rank 0's trace: Megatron's f and g\n");
  lab::Table table({{.header = "pass", .key = "pass", .width = 9, .align = lab::Align::left},
                    {.header = "op", .key = "op", .width = 2},
                    {.header = "where", .key = "where", .width = 46, .align = lab::Align::left, .gap = 2},
                    {.header = "collective", .key = "collective", .width = 15, .align = lab::Align::left},
                    {.header = "bytes", .key = "bytes", .width = 9},
                    {.header = "time", .key = "seconds", .width = 9}});
  table.print_header();
  for (const LayerPlace& p : places) {
    const bool sends = !p.collective.empty();  // an identity sends nothing
    table.add({p.pass, p.op, p.where, {p.collective, sends ? p.collective : "(identity)"},
               {p.bytes, sends ? format_bytes(std::uint64_t(p.bytes)) : "-"},
               {p.seconds, sends ? format_seconds(p.seconds) : "-"}});
  }
  return table.json();
}

}  // namespace tp_lab
