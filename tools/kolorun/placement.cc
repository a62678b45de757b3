#include "placement.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string_view>

#include "common/settings.h"
#include "common/sha256.h"

namespace kolo::kolorun {
namespace {

std::string_view nameOf(std::string_view entry) {
  auto eq = entry.find('=');
  return eq == std::string_view::npos ? entry : entry.substr(0, eq);
}

// Replaces (or appends) NAME=VALUE in env.
void setVariable(std::vector<std::string>& env, std::string_view name,
                 const std::string& value) {
  std::string entry = std::string(name) + "=" + value;
  for (auto& e : env) {
    if (nameOf(e) == name) {
      e = std::move(entry);
      return;
    }
  }
  env.push_back(std::move(entry));
}

}  // namespace

bool isForwarded(const std::string& entry) {
  return entry.rfind("KOLO_", 0) == 0 || entry.rfind("HOROVOD_", 0) == 0;
}

std::optional<std::string> jobVariable(const std::vector<std::string>& exports,
                                       const std::string& name) {
  for (auto it = exports.rbegin(); it != exports.rend(); ++it) {
    if (nameOf(*it) != name) continue;
    if (it->size() > name.size()) return it->substr(name.size() + 1);
    break;  // -x NAME: kolorun's own value
  }
  const char* v = std::getenv(name.c_str());
  return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
}

double koloTimeoutSeconds(const std::vector<std::string>& exports) {
  const auto value = jobVariable(exports, "KOLO_TIMEOUT");
  const double t = value ? std::atof(value->c_str()) : 0;
  return t > 0 ? t : Settings{}.timeoutSeconds;
}

std::vector<Placement> planPlacement(const LaunchOptions& options) {
  std::vector<Placement> out;
  out.reserve(options.numRanks);
  if (!options.hosts.empty()) {
    // Ranks per host: slots in order, then the excess one per host in turn.
    const size_t n = options.hosts.size();
    std::vector<int> count(n, 0);
    int left = options.numRanks;
    for (size_t h = 0; h < n && left > 0; ++h) {
      count[h] = std::min(left, options.hosts[h].slots);
      left -= count[h];
    }
    for (size_t h = 0; left > 0; h = (h + 1) % n, --left) ++count[h];
    const int used = static_cast<int>(
        std::count_if(count.begin(), count.end(), [](int c) { return c > 0; }));
    int rank = 0;
    int crossRank = 0;
    for (size_t h = 0; h < n; ++h) {
      if (count[h] == 0) continue;
      for (int l = 0; l < count[h]; ++l) {
        Placement p;
        p.rank = rank++;
        p.size = options.numRanks;
        p.host = options.hosts[h].host;
        p.localRank = l;
        p.localSize = count[h];
        p.crossRank = crossRank;
        p.crossSize = used;
        out.push_back(p);
      }
      ++crossRank;
    }
    return out;
  }
  for (int r = 0; r < options.numRanks; ++r) {
    Placement p;
    p.rank = r;
    p.size = options.numRanks;
    p.localRank = r;
    p.localSize = options.numRanks;
    p.crossRank = 0;
    p.crossSize = 1;
    out.push_back(p);
  }
  return out;
}

std::string makeJobId() {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now).count();
  std::random_device rd;
  char buf[96];
  std::snprintf(buf, sizeof buf, "kolorun-%d-%llx-%08x", static_cast<int>(getpid()),
                static_cast<unsigned long long>(micros), static_cast<unsigned>(rd()));
  return buf;
}

std::string ensureJobSecret() {
  // Only the two secret variables: a malformed unrelated setting is the
  // ranks' to report, not kolorun's.
  Settings settings;
  if (const char* v = std::getenv("KOLO_JOB_SECRET"); v != nullptr)
    settings.jobSecret = v;
  if (const char* v = std::getenv("KOLO_JOB_SECRET_FILE"); v != nullptr) {
    settings.jobSecretFile = v;
  }
  std::string secret = settings.resolveJobSecret();
  if (secret.empty()) {
    const std::string bytes = randomBytes(32);
    secret = toHex(bytes.data(), bytes.size());
  }
  setenv("KOLO_JOB_SECRET", secret.c_str(), 1);
  return secret;
}

std::vector<std::string> rankEnvironment(const std::vector<std::string>& base,
                                         const std::vector<std::string>& exports,
                                         const Placement& placement,
                                         const JobIdentity& job) {
  std::vector<std::string> env = base;
  for (const auto& spec : exports) {
    auto eq = spec.find('=');
    if (eq != std::string::npos) {
      setVariable(env, spec.substr(0, eq), spec.substr(eq + 1));
    } else if (const char* v = std::getenv(spec.c_str()); v != nullptr) {
      // Locally the variable is inherited anyway; a remote launcher forwards it.
      setVariable(env, spec, v);
    }
  }
  setVariable(env, "KOLO_RANK", std::to_string(placement.rank));
  setVariable(env, "KOLO_SIZE", std::to_string(placement.size));
  setVariable(env, "KOLO_LOCAL_RANK", std::to_string(placement.localRank));
  setVariable(env, "KOLO_LOCAL_SIZE", std::to_string(placement.localSize));
  setVariable(env, "KOLO_CROSS_RANK", std::to_string(placement.crossRank));
  setVariable(env, "KOLO_CROSS_SIZE", std::to_string(placement.crossSize));
  setVariable(env, "KOLO_RENDEZVOUS", job.rendezvous);
  if (!placement.host.empty()) setVariable(env, "KOLO_HOST_ID", placement.host);
  if (!job.networkInterface.empty()) setVariable(env, "KOLO_IFACE", job.networkInterface);
  setVariable(env, "KOLO_JOB_ID", job.jobId);
  if (job.elastic) {
    setVariable(env, "KOLO_ELASTIC_WORKER", std::to_string(placement.rank));
    setVariable(env, "KOLO_ELASTIC_TIMEOUT",
                std::to_string(static_cast<long>(job.elasticTimeoutSeconds + 0.999)));
  }
  return env;
}

}  // namespace kolo::kolorun
