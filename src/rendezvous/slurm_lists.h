// Slurm's compressed lists, as its variables write them.
//
// Host lists (SLURM_JOB_NODELIST, SLURM_STEP_NODELIST):
//   list   := item (',' item)*         a ',' inside [...] separates ranges
//   item   := NAME-PART (NAME-PART | '[' ranges ']')*
//   ranges := range (',' range)*
//   range  := NUM | NUM '-' NUM        ascending; NUM is 1-18 digits
// An item expands to the product of its bracket groups, the leftmost group
// varying slowest: "rack[1-2]-n[1,3]" is rack1-n1, rack1-n3, rack2-n1,
// rack2-n3. Every number of a range is zero-padded to the width of the
// range's first number: "node[08-10]" is node08, node09, node10; "n[8-10]"
// is n8, n9, n10. NAME-PART characters are those of host names (letters,
// digits, '.', '-', '_').
//
// Count lists (SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE):
//   counts := run (',' run)*
//   run    := NUM | NUM '(x' NUM ')'    "2(x3),1" is 2, 2, 2, 1
//
// Both throw Error(kInvalidArgument) naming the variable, its value and the
// part that is wrong; a list longer than kMaxSlurmNodes is an error too (a
// typo such as "n[1-99999999]" must not exhaust memory).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kolo::rendezvous {

inline constexpr size_t kMaxSlurmNodes = size_t{1} << 20;

// `name` is the variable the text came from (for messages).
std::vector<std::string> expandSlurmHostList(std::string_view name,
                                             std::string_view text);

std::vector<int> expandSlurmCounts(std::string_view name, std::string_view text);

}  // namespace kolo::rendezvous
