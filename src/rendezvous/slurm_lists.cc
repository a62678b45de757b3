// The expansion walks the text once. A host list is cut into items at the
// commas outside brackets; each item is read left to right, keeping the
// names expanded so far ("partial"): a literal part is appended to every
// partial name, a bracket group replaces each partial name by one name per
// number of its ranges (so the leftmost group varies slowest). The size of
// the result is checked before each group is applied, so a huge range fails
// before anything is allocated.
#include "rendezvous/slurm_lists.h"

#include <cstdint>

#include "common/check.h"

namespace kolo::rendezvous {
namespace {

constexpr size_t kMaxDigits = 18;  // fits uint64_t with room

[[noreturn]] void bad(std::string_view name, std::string_view text,
                      const std::string& what) {
  KOLO_THROW(ErrorCode::kInvalidArgument, name << "='" << text << "': " << what);
}

bool isDigits(std::string_view s) {
  if (s.empty() || s.size() > kMaxDigits) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

uint64_t toNumber(std::string_view digits) {
  uint64_t v = 0;
  for (char c : digits) v = v * 10 + static_cast<uint64_t>(c - '0');
  return v;
}

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '-' || c == '_';
}

// One range of a bracket group: lo..hi, each written with at least `width`
// digits.
struct Range {
  uint64_t lo = 0;
  uint64_t hi = 0;
  size_t width = 0;
};

std::string padded(uint64_t v, size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// A bracket group's contents: "01-03,07".
std::vector<Range> parseRanges(std::string_view name, std::string_view text,
                               std::string_view item, std::string_view group) {
  std::vector<Range> ranges;
  size_t pos = 0;
  while (true) {
    const size_t comma = group.find(',', pos);
    const std::string_view part = group.substr(
        pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    const size_t dash = part.find('-');
    const std::string_view lo = part.substr(0, dash);
    const std::string_view hi =
        dash == std::string_view::npos ? lo : part.substr(dash + 1);
    if (!isDigits(lo) || !isDigits(hi)) {
      bad(name, text,
          "'" + std::string(part) + "' in '" + std::string(item) +
              "' is not a number or a range N-M");
    }
    Range r{toNumber(lo), toNumber(hi), lo.size()};
    if (r.hi < r.lo) {
      bad(name, text,
          "'" + std::string(part) + "' in '" + std::string(item) +
              "' is a descending range");
    }
    ranges.push_back(r);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return ranges;
}

// Appends the names of one item to `hosts`.
void expandItem(std::string_view name, std::string_view text, std::string_view item,
                std::vector<std::string>& hosts) {
  const std::string quoted = "'" + std::string(item) + "'";
  if (item.front() == '[') bad(name, text, quoted + " has no name before '['");
  std::vector<std::string> partial = {""};
  size_t i = 0;
  while (i < item.size()) {
    if (item[i] == ']') bad(name, text, quoted + " has a ']' without '['");
    if (item[i] != '[') {
      const size_t stop = item.find_first_of("[]", i);
      const std::string_view literal = item.substr(i, stop - i);
      for (char c : literal) {
        if (!isNameChar(c)) {
          bad(name, text,
              quoted + " has '" + std::string(1, c) + "', which no host name has");
        }
      }
      for (auto& p : partial) p.append(literal);
      i = stop == std::string_view::npos ? item.size() : stop;
      continue;
    }
    const size_t close = item.find(']', i);
    if (close == std::string_view::npos) bad(name, text, quoted + " lacks a ']'");
    const std::string_view group = item.substr(i + 1, close - i - 1);
    if (group.find('[') != std::string_view::npos) {
      bad(name, text, quoted + " has a '[' inside [...]");
    }
    const std::vector<Range> ranges = parseRanges(name, text, item, group);
    uint64_t count = 0;  // stops growing past the limit (no overflow)
    for (const Range& r : ranges) {
      if (count <= kMaxSlurmNodes) count += r.hi - r.lo + 1;  // each <= 10^18
    }
    if (count > kMaxSlurmNodes ||
        partial.size() * count + hosts.size() > kMaxSlurmNodes) {
      bad(name, text,
          quoted + " names more than " + std::to_string(kMaxSlurmNodes) + " hosts");
    }
    std::vector<std::string> next;
    next.reserve(partial.size() * count);
    for (const auto& p : partial) {
      for (const Range& r : ranges) {
        for (uint64_t v = r.lo; v <= r.hi; ++v) next.push_back(p + padded(v, r.width));
      }
    }
    partial = std::move(next);
    i = close + 1;
  }
  for (auto& p : partial) hosts.push_back(std::move(p));
}

}  // namespace

std::vector<std::string> expandSlurmHostList(std::string_view name,
                                             std::string_view text) {
  if (text.empty()) bad(name, text, "no host");
  std::vector<std::string> hosts;
  size_t pos = 0;
  for (int index = 1;; ++index) {
    // The item ends at the first ',' outside brackets (a stray ']' closes
    // nothing; expandItem names it).
    size_t end = pos;
    int depth = 0;
    for (; end < text.size(); ++end) {
      if (text[end] == '[') ++depth;
      if (text[end] == ']' && depth > 0) --depth;
      if (text[end] == ',' && depth == 0) break;
    }
    const std::string_view item = text.substr(pos, end - pos);
    if (item.empty()) bad(name, text, "entry " + std::to_string(index) + " is empty");
    expandItem(name, text, item, hosts);
    if (end >= text.size()) break;
    pos = end + 1;
  }
  return hosts;
}

std::vector<int> expandSlurmCounts(std::string_view name, std::string_view text) {
  if (text.empty()) bad(name, text, "no count");
  std::vector<int> counts;
  size_t pos = 0;
  for (int index = 1;; ++index) {
    const size_t comma = text.find(',', pos);
    const std::string_view run = text.substr(
        pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    if (run.empty()) bad(name, text, "entry " + std::to_string(index) + " is empty");
    const size_t paren = run.find('(');
    const std::string_view count = run.substr(0, paren);
    std::string_view repeat = "1";
    if (paren != std::string_view::npos) {
      const bool form =
          run.size() > paren + 3 && run.substr(paren, 2) == "(x" && run.back() == ')';
      repeat = form ? run.substr(paren + 2, run.size() - paren - 3) : "";
    }
    if (!isDigits(count) || !isDigits(repeat) || toNumber(count) > (1u << 30) ||
        toNumber(repeat) < 1) {
      bad(name, text,
          "'" + std::string(run) + "' is not N or N(xREPEAT) (as in 2(x3),1)");
    }
    if (toNumber(repeat) > kMaxSlurmNodes - counts.size()) {
      bad(name, text, "counts more than " + std::to_string(kMaxSlurmNodes) + " nodes");
    }
    counts.insert(counts.end(), toNumber(repeat), static_cast<int>(toNumber(count)));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return counts;
}

}  // namespace kolo::rendezvous
