#include "host_list.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "options.h"

namespace kolo::kolorun {
namespace {

constexpr int kMaxSlots = 65536;

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

int parseSlots(const std::string& text, const std::string& where) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < 1 || v > kMaxSlots) {
    throw UsageError(where + ": slots must be a positive integer, got '" + text + "'");
  }
  return static_cast<int>(v);
}

void checkHostName(const std::string& host, const std::string& where) {
  if (host.empty()) throw UsageError(where + ": empty host name");
  for (char c : host) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' || c == ':' ||
              c == '%';
    if (!ok) {
      throw UsageError(where + ": '" + host + "' is not a host name or address");
    }
  }
}

// "HOST", "HOST:SLOTS", "[V6]", "[V6]:SLOTS".
HostSlots parseEntry(const std::string& entry, const std::string& where) {
  HostSlots h;
  std::string slots;
  if (!entry.empty() && entry.front() == '[') {
    size_t close = entry.find(']');
    if (close == std::string::npos)
      throw UsageError(where + ": missing ']' in '" + entry + "'");
    h.host = entry.substr(1, close - 1);
    std::string rest = entry.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':')
        throw UsageError(where + ": unexpected '" + rest + "' after ']'");
      slots = rest.substr(1);
      if (slots.empty())
        throw UsageError(where + ": missing slots after ':' in '" + entry + "'");
    }
  } else {
    size_t colon = entry.find(':');
    if (colon != std::string::npos && entry.find(':', colon + 1) != std::string::npos) {
      throw UsageError(where + ": '" + entry +
                       "' has several ':'; write an IPv6 address as [ADDR]:SLOTS");
    }
    h.host = entry.substr(0, colon);
    if (colon != std::string::npos) {
      slots = entry.substr(colon + 1);
      if (slots.empty())
        throw UsageError(where + ": missing slots after ':' in '" + entry + "'");
    }
  }
  checkHostName(h.host, where);
  if (!slots.empty()) h.slots = parseSlots(slots, where + " ('" + entry + "')");
  return h;
}

void checkDistinct(const std::vector<HostSlots>& hosts, const std::string& source) {
  std::set<std::string> seen;
  for (const auto& h : hosts) {
    if (!seen.insert(h.host).second) {
      throw UsageError(source + ": host '" + h.host + "' is listed twice");
    }
  }
}

}  // namespace

std::vector<HostSlots> parseHostList(std::string_view text) {
  std::vector<HostSlots> hosts;
  if (trim(text).empty()) throw UsageError("-H: empty host list");
  size_t pos = 0;
  int index = 1;
  while (true) {
    size_t comma = text.find(',', pos);
    std::string entry = trim(text.substr(
        pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
    std::string where = "-H entry " + std::to_string(index);
    if (entry.empty())
      throw UsageError(where + ": empty (stray ',' in '" + std::string(text) + "')");
    hosts.push_back(parseEntry(entry, where));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
    ++index;
  }
  checkDistinct(hosts, "-H");
  return hosts;
}

std::vector<HostSlots> parseHostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw UsageError("--hostfile: cannot read '" + path + "': " + std::strerror(errno));
  }
  std::vector<HostSlots> hosts;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string first;
    if (!(words >> first)) continue;
    std::string where = path + ":" + std::to_string(number);
    HostSlots h = parseEntry(first, where);
    std::string word;
    while (words >> word) {
      if (word.rfind("slots=", 0) == 0) {
        if (first.find(':') != std::string::npos && first.front() != '[') {
          throw UsageError(where + ": slots given twice ('" + first + "' and '" + word +
                           "')");
        }
        h.slots = parseSlots(word.substr(6), where);
      } else if (word.rfind("max_slots=", 0) == 0) {
        // Open MPI's cap; kolorun places by slots only.
      } else {
        throw UsageError(where + ": unexpected '" + word + "' (expected slots=N)");
      }
    }
    hosts.push_back(h);
  }
  if (hosts.empty()) throw UsageError("--hostfile: '" + path + "' lists no hosts");
  checkDistinct(hosts, "--hostfile " + path);
  return hosts;
}

}  // namespace kolo::kolorun
