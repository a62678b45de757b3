#include "remote_launch.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <stdexcept>

#include "api/network_address.h"
#include "cpu_binding.h"
#include "options.h"

namespace kolo::kolorun {
namespace {

// The remote wrapper, run as: sh -c WRAPPER kolorun DIR N NAME=VALUE... CMD ARGS
// (one line, so that any login shell passes it on unchanged).
//   With KOLO_JOB_SECRET_STDIN=1 among the variables, the first line of the
//   control stream is the job secret (never on a command line, where `ps`
//   on either host would show it).
//   fd 3 keeps the control stream: a background list's stdin is /dev/null
//   unless redirected explicitly, so the watcher reads it from fd 3.
//   The watcher sends each line as a signal to the rank; at end of input it
//   kills the process group (the wrapper, the watcher, the rank and what
//   the rank started).
constexpr std::string_view kWrapperHead =
    "d=$1; n=$2; shift 2; "
    "while [ \"$n\" -gt 0 ]; do export \"$1\"; shift; n=$((n-1)); done; "
    "if [ \"$KOLO_JOB_SECRET_STDIN\" = 1 ]; then unset KOLO_JOB_SECRET_STDIN; "
    "IFS= read -r KOLO_JOB_SECRET; export KOLO_JOB_SECRET; fi; "
    "cd \"$d\" 2>/dev/null || "
    "echo \"kolorun: $(uname -n) has no directory $d; running in $PWD\" >&2; "
    "command -v \"$1\" >/dev/null 2>&1 || "
    "{ echo \"kolorun: $1: command not found on $(uname -n)\" >&2; exit 127; }; ";
// The rest, after bindingShellFragment() when the rank is to be bound.
constexpr std::string_view kWrapperTail =
    "exec 3<&0; "
    "\"$@\" </dev/null 3<&- & p=$!; "
    "{ while IFS= read -r s; do kill -s \"$s\" \"$p\" 2>/dev/null; done; "
    "kill -s KILL 0; } <&3 & w=$!; "
    "exec 3<&-; "
    "wait \"$p\"; r=$?; kill \"$w\" 2>/dev/null; exit \"$r\"";

std::set<std::string> localAddresses() {
  std::set<std::string> out;
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (auto* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    char buf[INET6_ADDRSTRLEN];
    if (a->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf,
                sizeof buf);
      out.insert(buf);
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, buf,
                sizeof buf);
      out.insert(buf);
    }
  }
  freeifaddrs(list);
  return out;
}

// The numeric addresses `host` stands for: itself when it is an address,
// else what the resolver says.
std::vector<std::string> addressesOf(const std::string& host) {
  std::vector<std::string> out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  hints.ai_flags = AI_NUMERICHOST;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) {
    hints.ai_flags = 0;
    res = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  }
  for (auto* a = res; a != nullptr; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN];
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, buf,
                sizeof buf);
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, buf,
                sizeof buf);
    } else {
      continue;
    }
    out.emplace_back(buf);
  }
  freeaddrinfo(res);
  return out;
}

}  // namespace

std::string shellQuote(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

std::vector<std::string> splitCommandWords(std::string_view text, std::string_view flag) {
  std::vector<std::string> words;
  std::string word;
  bool inWord = false;
  char quote = 0;
  for (char c : text) {
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        word += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      inWord = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (inWord) words.push_back(std::move(word));
      word.clear();
      inWord = false;
    } else {
      word += c;
      inWord = true;
    }
  }
  if (quote != 0) {
    throw UsageError(std::string(flag) + ": unbalanced " + std::string(1, quote) +
                     " in '" + std::string(text) + "'");
  }
  if (inWord) words.push_back(std::move(word));
  if (words.empty()) throw UsageError(std::string(flag) + " needs a command");
  return words;
}

std::string remoteCommandLine(const std::string& workingDirectory,
                              const std::vector<std::string>& environment,
                              const std::vector<std::string>& command) {
  bool bound = false;
  for (const auto& e : environment) {
    bound = bound || e == "KOLO_BIND_TO=core" || e == "KOLO_BIND_TO=socket";
  }
  std::string wrapper(kWrapperHead);
  if (bound) wrapper += bindingShellFragment();
  wrapper += kWrapperTail;
  std::string line = "sh -c " + shellQuote(wrapper) + " kolorun " +
                     shellQuote(workingDirectory) + " " +
                     std::to_string(environment.size());
  for (const auto& e : environment) {
    // The secret goes through the control stream (the caller sends it).
    line += " " +
            shellQuote(e.starts_with("KOLO_JOB_SECRET=") ? "KOLO_JOB_SECRET_STDIN=1" : e);
  }
  for (const auto& w : command) line += " " + shellQuote(w);
  return line;
}

std::vector<std::string> sshArgv(const std::vector<std::string>& sshWords,
                                 const std::string& host, const std::string& line) {
  std::vector<std::string> argv = sshWords;
  argv.push_back(host);
  argv.push_back(line);
  return argv;
}

std::string remoteSignalName(int sig) {
  switch (sig) {
    case SIGKILL: return "KILL";
    case SIGHUP: return "HUP";
    default: return "TERM";  // INT and QUIT are ignored by background jobs
  }
}

bool isLocalHost(const std::string& host) {
  if (host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0) return true;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) {
    std::string own = name;
    if (host == own || own.rfind(host + ".", 0) == 0) return true;
  }
  const auto local = localAddresses();
  for (const auto& a : addressesOf(host)) {
    if (local.count(a) != 0) return true;
  }
  return false;
}

std::string addressTowards(const std::string& host, const std::string& networkInterface) {
  if (isLocalHost(host)) return "127.0.0.1";
  // The route decides what reaches the host. The interface named by
  // --network-interface is the ranks' (KOLO_IFACE); this machine may have
  // one of that name on another network, so it is only the fallback.
  std::string source = api::routeSourceAddress(host);
  if (!source.empty()) return source;
  if (!networkInterface.empty()) {
    try {
      return api::pickAdvertiseAddress(networkInterface, "");
    } catch (const std::exception&) {
      // Not an interface of this machine either.
    }
  }
  throw std::runtime_error(
      "host '" + host + "' does not resolve to an IPv4 address with a route from here");
}

}  // namespace kolo::kolorun
