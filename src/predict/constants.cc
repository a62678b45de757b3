#include "predict/constants.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "predict/json.h"

namespace kolo::predict {
namespace {

constexpr std::string_view kPathNames[kPaths] = {"shm", "tcp", "mpi", "shm-arena"};
constexpr std::string_view kTermNames[kTerms] = {"alpha",   "beta", "gamma",
                                                 "message", "call", "wake"};

std::string validPaths() {
  std::string s;
  for (auto n : kPathNames) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

std::string validTerms() {
  std::string s;
  for (auto n : kTermNames) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

PathConstants path(double alpha, double beta, double gamma, double message, double call) {
  PathConstants p;
  p[Term::kAlpha] = alpha;
  p[Term::kBeta] = beta;
  p[Term::kGamma] = gamma;
  p[Term::kMessage] = message;
  p[Term::kCall] = call;
  return p;
}

}  // namespace

std::string_view toString(Path p) {
  return kPathNames[static_cast<int>(p)];
}

std::string_view toString(Term t) {
  return kTermNames[static_cast<int>(t)];
}

Path pathFromName(std::string_view what, std::string_view name) {
  for (int i = 0; i < kPaths; ++i) {
    if (kPathNames[i] == name) return static_cast<Path>(i);
  }
  throw ConstantsError(std::string(what) + ": unknown path '" + std::string(name) +
                       "' (expected one of " + validPaths() + ")");
}

const Constants& builtInConstants() {
  // shm and tcp: fitted by `kolo-predict calibrate --from CSV --cores 2
  // --one-machine` on the 1- and 2-host rows of bench/scale/data/
  // netns_allreduce.csv and netns_allreduce_quiet.csv (one host: shm; 2
  // netns hosts at 100 Mbit/s, 1 and 10 Gbit/s: tcp across the veth links),
  // the run of bench/scale/report.py in docs/scale.md (2026-11-28).
  // shm-arena: `kolo-predict calibrate --transport shm --np 2,4 --cores 2`
  // (KOLO_SPIN_US=2, 4 KiB to 8 MiB, median of 3 runs; the netns rows hold
  // too few shm-algorithm runs to fit it). 2 cores shared with builds: the
  // errors are in docs/scale.md.
  static const Constants c = [] {
    Constants k;
    k[Path::kShm] = path(5.59e-06, 1.06e-09, 0.0, 0.0, 0.0);
    k[Path::kTcp] = path(5.10e-05, 1.28e-09, 2.22e-10, 5.87e-05, 0.0);
    // mpi: not calibrated here; taken as tcp's (calibrate --transport mpi).
    k[Path::kMpi] = k[Path::kTcp];
    k[Path::kShmArena] = path(0.0, 2.47e-10, 5.76e-10, 0.0, 1.07e-06);
    k.source = "built-in";
    return k;
  }();
  return c;
}

Constants constantsFromJson(std::string_view text, std::string_view source,
                            const Constants& base) {
  const JsonValue doc = parseJson(text, source);
  const std::string where(source);
  if (!doc.isObject() || doc.find("kolo_predict_constants") == nullptr) {
    throw ConstantsError(where +
                         ": not a kolo-predict constants file (no "
                         "\"kolo_predict_constants\" member; write one with "
                         "`kolo-predict calibrate`)");
  }
  const JsonValue* version = doc.find("kolo_predict_constants");
  if (!version->isNumber() || version->number != 1) {
    throw ConstantsError(where +
                         ": kolo_predict_constants is not 1 (a format this kolo "
                         "does not read)");
  }
  for (const auto& [key, value] : doc.object) {
    if (key != "kolo_predict_constants" && key != "source" && key != "paths") {
      throw ConstantsError(where + ": unknown member \"" + key +
                           "\" (expected kolo_predict_constants, source, paths)");
    }
  }
  Constants c = base;
  c.source = where;
  if (const JsonValue* s = doc.find("source"); s != nullptr && s->isString()) {
    c.source = where + " (" + s->string + ")";
  }
  const JsonValue* paths = doc.find("paths");
  if (paths == nullptr) return c;
  if (!paths->isObject()) throw ConstantsError(where + ": \"paths\" is not an object");
  for (const auto& [name, terms] : paths->object) {
    const Path p = pathFromName(where + ": paths", name);
    if (!terms.isObject()) {
      throw ConstantsError(where + ": paths." + name + " is not an object");
    }
    for (const auto& [termName, value] : terms.object) {
      int t = 0;
      while (t < kTerms && kTermNames[t] != termName) ++t;
      if (t == kTerms) {
        throw ConstantsError(where + ": paths." + name + ": unknown term '" + termName +
                             "' (expected one of " + validTerms() + ")");
      }
      if (!value.isNumber() || !std::isfinite(value.number) || value.number < 0) {
        throw ConstantsError(where + ": paths." + name + "." + termName +
                             " must be a non-negative number of seconds");
      }
      c[p].value[t] = value.number;
    }
  }
  return c;
}

Constants loadConstants(const std::string& path, const Constants& base) {
  std::ifstream in(path);
  if (!in) {
    throw ConstantsError("cannot read the constants file '" + path +
                         "' (KOLO_PREDICT_CONSTANTS or --constants)");
  }
  std::stringstream text;
  text << in.rdbuf();
  return constantsFromJson(text.str(), path, base);
}

std::string constantsToJson(const Constants& c) {
  std::ostringstream os;
  os << "{\"kolo_predict_constants\": 1,\n \"source\": " << jsonQuote(c.source)
     << ",\n \"paths\": {";
  for (int p = 0; p < kPaths; ++p) {
    os << (p > 0 ? ",\n  " : "\n  ") << jsonQuote(kPathNames[p]) << ": {";
    for (int t = 0; t < kTerms; ++t) {
      os << (t > 0 ? ", " : "") << jsonQuote(kTermNames[t]) << ": "
         << jsonNumber(c.paths[p].value[t]);
    }
    os << "}";
  }
  os << "}}\n";
  return os.str();
}

void saveConstants(const std::string& path, const Constants& c) {
  std::ofstream out(path);
  out << constantsToJson(c);
  out.close();
  if (!out) throw ConstantsError("cannot write the constants file '" + path + "'");
}

}  // namespace kolo::predict
