#include "python_helper.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <stdexcept>

#ifndef KOLO_SOURCE_DIR
#define KOLO_SOURCE_DIR ""
#endif

namespace kolo::predict::cli {

namespace {

std::string shellQuoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

bool exists(const std::string& path) {
  return ::access(path.c_str(), R_OK) == 0;
}

}  // namespace

std::string helperPath(const std::string& file) {
  std::string built;
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    built = dir + "/../python/kolo/predict/" + file;
    if (exists(built)) return built;
  }
  const std::string source =
      std::string(KOLO_SOURCE_DIR) + "/python/kolo/predict/" + file;
  if (exists(source)) return source;
  throw std::runtime_error("kolo-predict: helper " + file + " found neither at " + built +
                           " nor at " + source);
}

std::string runHelper(const std::string& python, const std::string& helper,
                      const std::vector<std::string>& args) {
  char errPath[] = "/tmp/kolo-predict-XXXXXX";
  const int fd = ::mkstemp(errPath);
  if (fd < 0) throw std::runtime_error("kolo-predict: cannot create a temporary file");
  ::close(fd);
  std::string command = shellQuoted(python) + " " + shellQuoted(helper);
  for (const auto& a : args) command += " " + shellQuoted(a);
  command += " 2>" + shellQuoted(errPath);
  std::string out;
  int status = -1;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char buf[4096];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
    status = ::pclose(p);
  }
  std::ifstream errFile(errPath);
  std::stringstream err;
  err << errFile.rdbuf();
  ::unlink(errPath);
  if (status != 0) {
    std::string text = err.str();
    while (!text.empty() && text.back() == '\n') text.pop_back();
    if (text.empty()) {
      text = "kolo-predict: " + python + " " + helper + " failed (status " +
             std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : status) + ")";
    }
    throw std::runtime_error(text);
  }
  return out;
}

std::vector<LayerGrad> readModelScript(const std::string& python,
                                       const std::string& script) {
  const std::string out = runHelper(python, helperPath("from_model.py"), {script});
  std::vector<LayerGrad> layers;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const size_t a = line.find('\t');
    const size_t b = line.find('\t', a + 1);
    if (a == std::string::npos || b == std::string::npos) {
      throw std::runtime_error("kolo-predict: from_model.py printed '" + line +
                               "', not name<TAB>elements<TAB>share");
    }
    const unsigned long long elements = std::strtoull(line.c_str() + a + 1, nullptr, 10);
    const double share = std::strtod(line.c_str() + b + 1, nullptr);
    layers.push_back({line.substr(0, a), static_cast<size_t>(elements) * 4, share});
  }
  return layers;
}

}  // namespace kolo::predict::cli
