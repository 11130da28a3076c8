// labkit::lab::Table — a lab's table, printed and written as JSON from one list
// of columns, as nccl-tests prints its one header and a row per size:
//
//   lab::Table table({{.header = "mode", .key = "mode", .width = 9, .align = lab::Align::left},
//                     {.header = "T_step", .key = "t_step", .width = 9},
//                     {.key = "weights_limit"}});            // in the JSON only
//   table.print_header();                                    // mode         T_step
//   table.add({"naive", lab::seconds(t), limit});            // naive       11.6 us
//   lab::write_json(json, table.json());                     // [{"mode": "naive", "t_step": 1.16e-05, ...}]
//
// A cell is a value for the JSON and the text printed for it (by default the
// value in fmt's "{}"): a loss column prints the last loss and writes the curve.
// A null value leaves its key out of that row's JSON (a "-" where nothing was
// measured); empty cells at the end of a row print nothing, not even spaces,
// unless their column keeps them (a note column that printed "  {}" always).
//
// A table under its title line is indented ({.rows = "  "}), one whose header is
// a comment for gnuplot and the shell starts it with "# " ({.header = "# ",
// .rows = "  "}); a row may end with a note, two spaces after its last cell
// ("1.32x stage 0's (target <= 1.5x)"); a total or a heading between rows is
// printed (print_row) but kept out of the JSON.
//
// A row that prints a column per stage (a sweep: a row per rank count, the
// stages side by side) writes an object per stage, in "long" form as pandas'
// melt would: each column of a `group` goes into that group's object, beside
// every column of none ({"ranks": 8, "stage": 3, "exposed": 0.02}).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace labkit::lab {

enum class Align { left, right };

struct Column {
  std::string header;  // printed above the column; empty: the column is in the JSON only
  std::string key;     // its name in the JSON; empty: the column is printed only
  int width = 0;       // printed width; 0: as wide as its text (a last column)
  Align align = Align::right;
  int gap = 1;         // spaces before it (none before the first)
  std::string group;   // the JSON object it goes into, one per group in a row; empty: every one of them
  bool keep_empty = false;  // an empty cell at the end of a row still prints its gap and width
};

struct Cell {
  nlohmann::json value;
  std::string text;

  Cell(const char* text) : value(text), text(text) {}
  Cell(std::string text) : value(text), text(std::move(text)) {}
  Cell(std::string_view text) : Cell(std::string(text)) {}
  Cell(nlohmann::json value, std::string text) : value(std::move(value)), text(std::move(text)) {}
  template <class T>
    requires std::is_arithmetic_v<T>
  Cell(T number) : value(number), text(fmt::format("{}", number)) {}
};

// A number printed in fmt's `spec` ("{:.4f}", "{:.1e}"), written whole to the JSON.
template <class T>
Cell number(T value, std::string_view spec) {
  return {value, fmt::format(fmt::runtime(spec), value)};
}
// A number printed in `unit`s ("{:.1f}" of bytes with unit 1e6: megabytes), written whole.
template <class T>
Cell number(T value, std::string_view spec, double unit) {
  return {value, fmt::format(fmt::runtime(spec), double(value) / unit)};
}
// A share printed as a percentage ("18.3%"), written as the share (0.183).
Cell percent(double share);
// The same, or "-" (JSON null) where there is none.
Cell percent(std::optional<double> share);
// Bytes printed with their unit ("813 KiB"), written in bytes.
Cell bytes(double count);
// Seconds printed with their unit ("11.6 us"), written in seconds.
Cell seconds(double seconds);
// true as "yes", false as "NO": a check that failed stands out in a column of yeses.
Cell yes_no(bool holds);

// What a table's lines start with: `rows` before each row, `header` before the header.
struct Indent {
  std::string rows;
  std::string header = rows;
};

class Table {
 public:
  explicit Table(std::vector<Column> columns, Indent indent = {});

  void print_header() const;
  // Prints the row (one cell per column, in order), then `note` two spaces
  // after its last cell, and keeps the row for json().
  void add(std::vector<Cell> row, std::string_view note = {});
  // Prints the row as add() does, and keeps it out of json().
  void print_row(std::vector<Cell> row, std::string_view note = {}) const;
  // Every row so far, an object each (one per group where columns have one), keyed by the columns' keys.
  const nlohmann::json& json() const { return rows_; }

 private:
  std::string line(const std::vector<std::string>& texts) const;
  void check(const std::vector<Cell>& row) const;

  std::vector<Column> columns_;
  std::vector<std::string> groups_;  // the columns' groups in order; one "" where none has a group
  Indent indent_;
  nlohmann::json rows_ = nlohmann::json::array();
};

}  // namespace labkit::lab
