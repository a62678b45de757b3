#include "host_discovery.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "options.h"

namespace kolo::kolorun {
namespace {

constexpr int kScriptSeconds = 10;

// Runs `sh -c script`, returning its standard output; throws naming the
// script when it fails, is killed, or outlives kScriptSeconds.
std::string runScript(const std::string& script) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("--host-discovery-script: pipe: ") +
                             std::strerror(errno));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    close(out[0]);
    close(out[1]);
    throw std::runtime_error(std::string("--host-discovery-script: fork: ") +
                             std::strerror(errno));
  }
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(out[1], STDOUT_FILENO);
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string text;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(kScriptSeconds);
  bool timedOut = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timedOut = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    char buf[4096];
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > (1 << 20)) {
        timedOut = true;  // a runaway script: treated as a failure
        break;
      }
    } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
      break;
    }
  }
  close(out[0]);
  if (timedOut) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timedOut) {
    throw std::runtime_error("--host-discovery-script '" + script +
                             "' did not finish within " + std::to_string(kScriptSeconds) +
                             " s (or printed over 1 MiB)");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error(
        "--host-discovery-script '" + script + "' failed (" +
        (WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                           : "killed by signal " + std::to_string(WTERMSIG(status))) +
        ")");
  }
  return text;
}

}  // namespace

HostDiscovery::HostDiscovery(std::string script, int slotsPerHost,
                             std::optional<std::pair<double, double>> cooldownSeconds)
    : script_(std::move(script)),
      slotsPerHost_(slotsPerHost),
      cooldown_(cooldownSeconds) {}

std::vector<HostSlots> HostDiscovery::discover() const {
  return parse(runScript(script_));
}

std::vector<HostSlots> HostDiscovery::parse(const std::string& output) const {
  std::vector<HostSlots> hosts;
  std::istringstream in(output);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    std::vector<HostSlots> one;
    try {
      one = parseHostList(line);
    } catch (const UsageError& e) {
      throw std::runtime_error("--host-discovery-script '" + script_ + "', line " +
                               std::to_string(number) + ": " + e.what());
    }
    if (one.size() != 1) {
      throw std::runtime_error("--host-discovery-script '" + script_ + "', line " +
                               std::to_string(number) +
                               ": one HOST[:SLOTS] per line, got '" + line + "'");
    }
    // "HOST" alone (or "[IPv6]"): --slots-per-host slots.
    const bool bracketed = line.front() == '[';
    const bool slotsGiven = bracketed ? line.find("]:") != std::string::npos
                                      : std::count(line.begin(), line.end(), ':') == 1;
    if (!slotsGiven) one[0].slots = slotsPerHost_;
    hosts.push_back(one[0]);
  }
  return hosts;
}

void HostDiscovery::blacklist(const std::string& host, Clock::time_point now) {
  if (!cooldown_) {
    until_[host] = std::nullopt;
    return;
  }
  std::uniform_real_distribution<double> seconds(cooldown_->first, cooldown_->second);
  until_[host] = now + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(seconds(random_)));
}

bool HostDiscovery::blacklisted(const std::string& host, Clock::time_point now) const {
  auto it = until_.find(host);
  if (it == until_.end()) return false;
  return !it->second || now < *it->second;
}

}  // namespace kolo::kolorun
