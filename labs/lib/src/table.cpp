#include "labkit/lab/table.h"

#include <algorithm>
#include <stdexcept>

#include "labkit/units.h"

namespace labkit::lab {

Cell percent(double share) { return {share, fmt::format("{:.1f}%", 100 * share)}; }
Cell percent(std::optional<double> share) { return share ? percent(*share) : Cell{nullptr, "-"}; }

Cell bytes(double count) { return {count, format_bytes(std::uint64_t(count))}; }

Cell seconds(double seconds) { return {seconds, format_seconds(seconds)}; }

Cell yes_no(bool holds) { return {holds, holds ? "yes" : "NO"}; }

Table::Table(std::vector<Column> columns, Indent indent) : columns_(std::move(columns)), indent_(std::move(indent)) {
  for (const Column& c : columns_)
    if (!c.group.empty() && std::find(groups_.begin(), groups_.end(), c.group) == groups_.end())
      groups_.push_back(c.group);
  if (groups_.empty()) groups_.push_back("");
}

std::string Table::line(const std::vector<std::string>& texts) const {
  std::size_t printed = 0;  // past the last printed cell with text: empty ones after it print nothing
  for (std::size_t i = 0; i < texts.size(); ++i)
    if (!columns_[i].header.empty() && (!texts[i].empty() || columns_[i].keep_empty)) printed = i + 1;
  std::string out;
  bool first = true;
  for (std::size_t i = 0; i < printed; ++i) {
    const Column& c = columns_[i];
    if (c.header.empty()) continue;
    if (!first) out.append(std::size_t(c.gap), ' ');
    first = false;
    out += c.align == Align::left ? fmt::format("{:<{}}", texts[i], c.width) : fmt::format("{:>{}}", texts[i], c.width);
  }
  return out;
}

void Table::print_header() const {
  std::vector<std::string> headers;
  for (const Column& c : columns_) headers.push_back(c.header);
  fmt::print("{}{}\n", indent_.header, line(headers));
}

void Table::check(const std::vector<Cell>& row) const {
  if (row.size() != columns_.size())
    throw std::logic_error(fmt::format("Table: {} cells for {} columns", row.size(), columns_.size()));
}

void Table::print_row(std::vector<Cell> row, std::string_view note) const {
  check(row);
  std::vector<std::string> texts;
  for (Cell& cell : row) texts.push_back(std::move(cell.text));
  fmt::print("{}{}{}{}\n", indent_.rows, line(texts), note.empty() ? "" : "  ", note);
}

void Table::add(std::vector<Cell> row, std::string_view note) {
  check(row);
  for (const std::string& group : groups_) {
    nlohmann::json object = nlohmann::json::object();
    for (std::size_t i = 0; i < row.size(); ++i) {
      const Column& c = columns_[i];
      if (!c.key.empty() && (c.group.empty() || c.group == group) && !row[i].value.is_null())
        object[c.key] = row[i].value;
    }
    rows_.push_back(std::move(object));
  }
  print_row(std::move(row), note);
}

}  // namespace labkit::lab
