// Reading the quantities of kolo-predict's command line and files: sizes
// ("64M", "4K", "1.5G": binary multiples of bytes), counts ("25.6M":
// decimal, for parameter counts), link rates ("25gbit", "100mbit",
// "10Gbps": bits per second, decimal) and durations ("2us", "1.5ms", "0").
//
// Each parser takes the name of what is read (a flag such as "--bytes", or
// a file's field) and throws UnitError naming it and the text when the text
// is not a non-negative quantity of the expected kind.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kolo::predict {

class UnitError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Bytes: a number with an optional suffix K, M, G, T (also KB, KiB, ...),
// each 1024 times the last; a fraction is allowed ("25.6M") and rounded to
// whole bytes.
size_t parseBytes(std::string_view what, std::string_view text);

// A count: a number with an optional suffix k/K, M, G (1e3, 1e6, 1e9).
double parseCount(std::string_view what, std::string_view text);

// Bits per second: a number with a unit bit, kbit, mbit, gbit, tbit (also
// bps, kbps, mbps, gbps, tbps; any case), decimal multiples ("25gbit" =
// 25e9). A bare number is bits per second. "0" means not limited.
double parseRate(std::string_view what, std::string_view text);

// Seconds: a number with a unit ns, us, ms or s; a bare number must be 0.
double parseDuration(std::string_view what, std::string_view text);

// The short forms the tool prints: "64 MiB", "25 Gbit/s", "2 us".
std::string formatBytes(double bytes);
std::string formatRate(double bitsPerSecond);
std::string formatSeconds(double seconds);

}  // namespace kolo::predict
