// Checks, before any rank starts, that every remote host answers.
//
// probeHosts() runs `SSH... HOST 'exit 0'` for all hosts at once and waits
// up to `timeout` for them. A host fails the probe when its command exits
// non-zero (ssh: 255 for a connection failure) or is still running at the
// deadline (it is then killed). The result names each failed host with what
// happened and the last line its command printed on stderr, e.g.
//   "10.0.0.9: exited with code 255: ssh: connect to host 10.0.0.9 port 22:
//    No route to host"
// Blocking; uses waitpid on the pids it spawned only (safe beside other
// children).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace kolo::kolorun {

struct ProbeFailure {
  std::string host;
  std::string reason;
};

// `sshWords`: the words of --ssh-command. Throws std::runtime_error when the
// ssh command itself cannot be executed (not found).
std::vector<ProbeFailure> probeHosts(const std::vector<std::string>& sshWords,
                                     const std::vector<std::string>& hosts,
                                     std::chrono::milliseconds timeout);

}  // namespace kolo::kolorun
