#include "predict_cli.h"

#include <cstdlib>

#include "common/settings.h"
#include "predict/units.h"

namespace kolo::predict::cli {

std::optional<std::string> Args::value(std::string_view flag) {
  std::optional<std::string> out;
  const std::string prefix = std::string(flag) + "=";
  for (size_t i = 0; i < argv_.size(); ++i) {
    if (used_[i]) continue;
    if (argv_[i] == flag) {
      if (i + 1 >= argv_.size()) {
        throw UsageError(std::string(flag) + " needs a value");
      }
      used_[i] = used_[i + 1] = true;
      out = argv_[++i];
    } else if (argv_[i].rfind(prefix, 0) == 0) {
      used_[i] = true;
      out = argv_[i].substr(prefix.size());
    }
  }
  return out;
}

std::vector<std::string> Args::values(std::string_view flag) {
  std::vector<std::string> out;
  const std::string prefix = std::string(flag) + "=";
  for (size_t i = 0; i < argv_.size(); ++i) {
    if (used_[i]) continue;
    if (argv_[i] == flag) {
      if (i + 1 >= argv_.size()) throw UsageError(std::string(flag) + " needs a value");
      used_[i] = used_[i + 1] = true;
      out.push_back(argv_[++i]);
    } else if (argv_[i].rfind(prefix, 0) == 0) {
      used_[i] = true;
      out.push_back(argv_[i].substr(prefix.size()));
    }
  }
  return out;
}

bool Args::flag(std::string_view name) {
  bool found = false;
  for (size_t i = 0; i < argv_.size(); ++i) {
    if (!used_[i] && argv_[i] == name) {
      used_[i] = true;
      found = true;
    }
  }
  return found;
}

std::string Args::required(std::string_view flag) {
  auto v = value(flag);
  if (!v) throw UsageError(command_ + " needs " + std::string(flag));
  return *v;
}

void Args::finish() const {
  for (size_t i = 0; i < argv_.size(); ++i) {
    if (!used_[i]) {
      throw UsageError(argv_[i] + ": unknown argument of '" + command_ + "'");
    }
  }
}

long parseWhole(std::string_view flag, std::string_view text, long lo, long hi) {
  const std::string s(text);
  char* stop = nullptr;
  const long v = std::strtol(s.c_str(), &stop, 10);
  if (s.empty() || *stop != '\0' || v < lo || v > hi) {
    throw UsageError(std::string(flag) + " '" + s + "': expected a whole number from " +
                     std::to_string(lo) + " to " + std::to_string(hi));
  }
  return v;
}

void readLinkTiming(Args& args, double& linkBurst, double& spinSeconds) {
  try {
    if (auto v = args.value("--link-burst")) {
      linkBurst = static_cast<double>(parseBytes("--link-burst", *v));
    }
    if (auto v = args.value("--spin")) spinSeconds = parseDuration("--spin", *v);
  } catch (const UnitError& e) {
    throw UsageError(e.what());
  }
}

Constants constantsFor(Args& args) {
  if (auto file = args.value("--constants")) return loadConstants(*file);
  const Settings settings = Settings::fromEnvironment();
  if (!settings.predictConstants.empty()) return loadConstants(settings.predictConstants);
  return builtInConstants();
}

}  // namespace kolo::predict::cli
