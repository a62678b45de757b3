// Elastic host discovery (kolorun --host-discovery-script S): which hosts
// the job may use now, and which are blacklisted after a failure.
//
// discover() runs S with /bin/sh and reads its standard output: one host per
// non-empty line, "HOST:SLOTS" or "HOST" (then --slots-per-host slots,
// default 1). The script must finish within 10 s and exit 0; anything else
// (a malformed line, a failure, a timeout) throws std::runtime_error naming
// the script and what was wrong. kolorun calls it at launch and about once
// a second while the job runs (docs/elastic.md).
//
// Blacklist: a host on which a worker failed is not given new workers for a
// cool-down drawn uniformly from --blacklist-cooldown-range LO HI seconds,
// or, without that flag, for the rest of the job (as horovodrun does).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "host_list.h"

namespace kolo::kolorun {

class HostDiscovery {
 public:
  using Clock = std::chrono::steady_clock;

  HostDiscovery(std::string script, int slotsPerHost,
                std::optional<std::pair<double, double>> cooldownSeconds);

  std::vector<HostSlots> discover() const;

  // Parses the script's output (exposed for tests).
  std::vector<HostSlots> parse(const std::string& output) const;

  void blacklist(const std::string& host, Clock::time_point now);
  bool blacklisted(const std::string& host, Clock::time_point now) const;

 private:
  std::string script_;
  int slotsPerHost_;
  std::optional<std::pair<double, double>> cooldown_;
  std::map<std::string, std::optional<Clock::time_point>> until_;  // nullopt: for good
  std::mt19937 random_{std::random_device{}()};
};

}  // namespace kolo::kolorun
