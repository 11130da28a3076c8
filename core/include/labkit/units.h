// Seconds and bytes in the unit that reads best ("12.5 us", "1 MiB").
#pragma once

#include <cstdint>
#include <string>

namespace labkit {

// "850 ns", "12.5 us", "3.20 ms", "1.50 s"; beyond 0.001 ns .. 10^6 s, engineering notation ("1.00e+300 s").
std::string format_seconds(double seconds);
std::string format_bytes(std::uint64_t bytes);  // "512 B", "4 KiB", "1.5 MiB", up to "16 EiB"
// "1K", "64M": a byte count with an optional K/M/G (binary) suffix; throws on junk.
std::uint64_t parse_bytes(const std::string& text);
// "10us", "1.5ms", "2s", "0": a time of 0 or more, in ns, us, ms or s (a bare
// number is seconds); throws on junk and on negative times.
double parse_seconds(const std::string& text);

}  // namespace labkit
