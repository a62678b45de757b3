// Starting a rank on another host through an ssh-like command.
//
// kolorun runs `SSH... HOST 'LINE'` (SSH: the words of --ssh-command) and
// keeps a pipe to that command's stdin. LINE is one POSIX sh command line
// that the remote login shell runs; it
//   - exports the rank's variables (given as NAME=VALUE words),
//   - enters kolorun's working directory (warning, not failing, when the
//     remote host has no such directory, as mpirun does),
//   - fails with 127 and a message naming the host when the command is not
//     found there,
//   - with KOLO_BIND_TO=core or socket among the variables, binds the rank
//     to its CPUs of that host (cpu_binding.h, bindingShellFragment()),
//   - runs the command in the background with stdin from /dev/null and
//     waits for it, exiting with its status (128 + signal when killed),
//   - meanwhile reads the control stream (its stdin): each line is a signal
//     name to send to the rank; end of input (kolorun closed the pipe, or
//     died, or the connection dropped) kills the whole remote process group
//     with SIGKILL. So nothing outlives kolorun on a remote host.
// A background command of a non-interactive shell ignores SIGINT and
// SIGQUIT, so kolorun asks for SIGTERM instead of those (remoteSignalName).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kolo::kolorun {

// 'text' quoted for a POSIX shell (single quotes; a quote inside as '\'').
std::string shellQuote(std::string_view text);

// The words of an --ssh-command string, split on blanks; single or double
// quotes group words ("ssh -o 'ProxyCommand=a b'"). Throws UsageError naming
// `flag` on an unbalanced quote or an empty command.
std::vector<std::string> splitCommandWords(std::string_view text,
                                           std::string_view flag = "--ssh-command");

// The remote command line described above. A KOLO_JOB_SECRET=... entry of
// `environment` is not written into it: the line asks the remote side to
// read the secret as the first line of its control stream instead, which
// the caller must then send (RankProcess::sendControl).
std::string remoteCommandLine(const std::string& workingDirectory,
                              const std::vector<std::string>& environment,
                              const std::vector<std::string>& command);

// The argv kolorun spawns for a remote rank or a probe: ssh words, host, line.
std::vector<std::string> sshArgv(const std::vector<std::string>& sshWords,
                                 const std::string& host, const std::string& line);

// The control-stream word for a signal kolorun forwards (TERM for INT/QUIT).
std::string remoteSignalName(int sig);

// Whether `host` names this machine: localhost, a loopback address, this
// machine's host name, or an address of one of its interfaces (a name is
// resolved; an IP address needs no resolution).
bool isLocalHost(const std::string& host);

// The address a process on `host` should use to reach a server of ours:
// 127.0.0.1 for a local host, else the source address of our route to
// `host`; only when there is no route, the address of `networkInterface`
// (when this machine has it).
// Throws std::runtime_error naming the host when it cannot be resolved.
std::string addressTowards(const std::string& host, const std::string& networkInterface);

}  // namespace kolo::kolorun
