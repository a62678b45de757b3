// The hosts of a job: `-H host1:2,host2:2` or a hostfile.
//
// Grammar
//   -H        HOST[:SLOTS](,HOST[:SLOTS])*      SLOTS defaults to 1
//   hostfile  one host per line: "HOST", "HOST:SLOTS" or "HOST slots=SLOTS"
//             (the Open MPI form); '#' starts a comment; blank lines skipped
//   HOST      a name or an IPv4 address; an IPv6 address is written [ADDR]
// A host listed twice is an error (its slots would be ambiguous). Every
// error is a UsageError naming the entry, its position and what is wrong.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kolo::kolorun {

struct HostSlots {
  std::string host;  // as written (without the brackets of an IPv6 address)
  int slots = 1;
};

std::vector<HostSlots> parseHostList(std::string_view text);

// Reads and parses the file; throws UsageError naming the file when it
// cannot be read or a line is malformed (with its line number).
std::vector<HostSlots> parseHostfile(const std::string& path);

}  // namespace kolo::kolorun
