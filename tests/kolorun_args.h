// kolorun's command line as the unit tests of its parts give it: argument
// lists parsed by parseArguments, and the usage error a list produces.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "options.h"

namespace kolo::kolorun {

inline LaunchOptions parse(std::vector<std::string> args) {
  std::vector<const char*> argv = {"kolorun"};
  for (auto& a : args) argv.push_back(a.c_str());
  return parseArguments(static_cast<int>(argv.size()), argv.data());
}

// The UsageError's text, or "(no error)".
inline std::string usageErrorOf(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace kolo::kolorun
