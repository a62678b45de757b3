#include "bench_options.h"

#include <kolo/error.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace kolo::bench {
namespace {

constexpr size_t kMaxSizes = 256;

[[noreturn]] void fail(std::string_view flag, std::string_view value,
                       std::string_view why) {
  std::ostringstream os;
  os << flag << " '" << value << "': " << why;
  throw UsageError(os.str());
}

long parseLong(std::string_view flag, std::string_view text, long min) {
  long v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < min) {
    fail(flag, text, "expected an integer >= " + std::to_string(min));
  }
  return v;
}

Collective parseCollective(std::string_view flag, std::string_view text) {
  for (Collective c :
       {Collective::kAllreduce, Collective::kBroadcast, Collective::kAllgather,
        Collective::kReduceScatter, Collective::kAlltoall}) {
    if (text == toString(c)) return c;
  }
  if (text == "reduce_scatter") return Collective::kReduceScatter;
  if (text == "bcast") return Collective::kBroadcast;
  fail(flag, text, "expected allreduce, broadcast, allgather, reducescatter or alltoall");
}

}  // namespace

std::string_view toString(Collective c) {
  switch (c) {
    case Collective::kAllreduce: return "allreduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kAllgather: return "allgather";
    case Collective::kReduceScatter: return "reducescatter";
    case Collective::kAlltoall: return "alltoall";
  }
  return "invalid-collective";
}

size_t parseSize(std::string_view flag, std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  if (digits == 0) fail(flag, text, "not a size (e.g. 8, 1K, 64M)");
  unsigned long long v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + digits, v);
  if (ec != std::errc()) fail(flag, text, "size out of range");
  std::string suffix;
  for (char ch : text.substr(digits)) {
    suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  }
  unsigned long long mult = 0;
  if (suffix.empty() || suffix == "B") {
    mult = 1;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    mult = 1ULL << 10;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    mult = 1ULL << 20;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    mult = 1ULL << 30;
  } else {
    fail(flag, text,
         "not a size (e.g. 8, 1K, 64M): unknown suffix '" +
             std::string(text.substr(digits)) + "'");
  }
  if (v > std::numeric_limits<size_t>::max() / mult)
    fail(flag, text, "size out of range");
  return static_cast<size_t>(v * mult);
}

Options parseOptions(int argc, const char* const* argv) {
  Options o;
  size_t minBytes = 8, maxBytes = 64u << 20, factor = 2;
  std::string minText = "8", maxText = "64M";
  std::vector<size_t> explicitSizes;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      o.help = true;
      continue;
    }
    if (flag == "--list-settings") {
      o.listSettings = true;
      continue;
    }
    if (flag == "--json") {
      o.json = true;
      continue;
    }
    if (flag == "--check" || flag == "-c") {
      o.check = true;
      continue;
    }
    if (flag == "--no-check") {
      o.check = false;
      continue;
    }
    if (flag == "--inplace") {
      o.inPlace = true;
      continue;
    }
    static constexpr std::string_view kWithValue[] = {
        "-o", "-b", "-e", "-f",      "-n",         "-w",
        "-d", "-r", "-a", "--sizes", "--min-time", "--root"};
    bool known = false;
    for (std::string_view k : kWithValue) known = known || flag == k;
    if (!known) {
      throw UsageError(std::string(flag) + ": unknown option");
    }
    if (i + 1 >= argc) throw UsageError(std::string(flag) + ": needs a value");
    std::string_view value = argv[++i];
    if (flag == "-o") {
      o.collective = parseCollective(flag, value);
    } else if (flag == "-b") {
      minBytes = parseSize(flag, value);
      minText = value;
    } else if (flag == "-e") {
      maxBytes = parseSize(flag, value);
      maxText = value;
    } else if (flag == "-f") {
      factor = static_cast<size_t>(parseLong(flag, value, 2));
    } else if (flag == "-n") {
      o.iters = parseLong(flag, value, 1);
    } else if (flag == "-w") {
      o.warmup = parseLong(flag, value, 0);
    } else if (flag == "--root") {
      o.root = static_cast<int>(parseLong(flag, value, 0));
    } else if (flag == "--min-time") {
      char* end = nullptr;
      std::string text(value);
      double v = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !(v >= 0 && v <= 3600)) {
        fail(flag, value, "expected seconds between 0 and 3600");
      }
      o.minTime = v;
    } else if (flag == "-d") {
      try {
        o.dtype = parseDataType(value);
      } catch (const Error& e) {
        fail(flag, value,
             "expected float, double, half, bfloat16, int32, int64 or uint8");
      }
    } else if (flag == "-r") {
      try {
        o.op = parseReduceOp(value);
      } catch (const Error& e) {
        fail(flag, value, "expected sum, avg, min, max or prod");
      }
    } else if (flag == "-a") {
      if (value.empty()) fail(flag, value, "expected an algorithm name");
      o.algorithm = value;
    } else if (flag == "--sizes") {
      explicitSizes.clear();
      size_t start = 0;
      while (start <= value.size()) {
        size_t comma = value.find(',', start);
        if (comma == std::string_view::npos) comma = value.size();
        std::string_view item = value.substr(start, comma - start);
        if (!item.empty()) explicitSizes.push_back(parseSize(flag, item));
        start = comma + 1;
      }
      if (explicitSizes.empty()) fail(flag, value, "expected a list like 8,1K,1M");
      if (explicitSizes.size() > kMaxSizes) fail(flag, value, "too many sizes");
    }
  }
  if (!o.algorithm.empty() && o.collective != Collective::kAllreduce) {
    throw UsageError("-a '" + o.algorithm + "': applies to -o allreduce only, not -o " +
                     std::string(toString(o.collective)));
  }
  if (o.inPlace && o.collective != Collective::kAllreduce) {
    throw UsageError("--inplace: applies to -o allreduce only, not -o " +
                     std::string(toString(o.collective)));
  }
  if (!explicitSizes.empty()) {
    o.sizes = explicitSizes;
  } else {
    if (minBytes > maxBytes) {
      throw UsageError("-b '" + minText + "': larger than -e '" + maxText + "'");
    }
    for (size_t s = minBytes;; s *= factor) {
      o.sizes.push_back(s);
      if (o.sizes.size() > kMaxSizes) throw UsageError("-f: more than 256 sizes");
      if (s == 0 || s > maxBytes / factor) break;
    }
  }
  return o;
}

std::string usage() {
  return R"(usage: kolorun -np N kolo-bench [options]   (or: mpirun -np N kolo-bench ...)

Measures one kolo collective over a range of sizes, nccl-tests style.

  -o COLLECTIVE      allreduce (default), broadcast, allgather, reducescatter, alltoall
  -b MINBYTES        smallest size (8); sizes like 8, 1K, 64M, 1G
  -e MAXBYTES        largest size (64M)
  -f FACTOR          multiply the size by FACTOR each step (2)
  --sizes LIST       explicit sizes instead of -b/-e/-f, e.g. 8,1K,64K,1M
  -n ITERS           timed iterations per size (20)
  -w WARMUP          untimed iterations before them (5)
  --min-time SECONDS raise ITERS so that each size runs about this long
  -d DTYPE           float (default), double, half, bfloat16, int32, int64, uint8
  -r OP              sum (default), avg, min, max, prod
  -a ALGO            allreduce algorithm (shm, ring, rhd, tree, hier); default: table
  --root RANK        broadcast root (0)
  --inplace          allreduce in place (send == recv)
  --json             print one JSON object per size instead of the table
  --check            verify every element after the timed loop (default)
  --no-check         skip the verification
  --list-settings    print every KOLO_* setting (env, default, doc) and exit
  -h, --help         this text

Size is the buffer of the collective: allreduce/broadcast the vector, allgather
the gathered output, reducescatter the input, alltoall each rank's send buffer.
Time: back-to-back iterations after a barrier, total / ITERS, max over ranks.
algbw = size / time; busbw = algbw * 2(n-1)/n (allreduce), (n-1)/n (allgather,
reducescatter, alltoall), 1 (broadcast). Exit status: 0 ok, 1 a wrong result or
an error, 2 a bad flag.
)";
}

}  // namespace kolo::bench
