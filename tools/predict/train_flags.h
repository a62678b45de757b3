// Parsing of kolo-predict train's quantities: counts with K/M/G suffixes
// ("25.6M"), link rates ("25gbit", "100mbit", "10G"), times ("2us",
// "1.5ms"). Each throws kolo::Error(kInvalidArgument) naming the flag and
// the text it could not read.
#pragma once

#include <string>

namespace kolo::predict::cli {

// "25.6M" -> 25.6e6; suffixes K, M, G (powers of 1000), case-insensitive.
double parseCount(const std::string& flag, const std::string& text);
// Bits per second: a number with kbit, mbit, gbit, tbit (powers of 1000;
// also k, m, g, t), or bit; a bare number is bits per second.
double parseBitsPerSecond(const std::string& flag, const std::string& text);
// Seconds: a number with ns, us, ms or s; a bare number is seconds.
double parseSeconds(const std::string& flag, const std::string& text);
// An integer >= minimum.
int parseInt(const std::string& flag, const std::string& text, int minimum);

}  // namespace kolo::predict::cli
