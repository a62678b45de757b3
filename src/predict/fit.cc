// The least-squares fit of the constants.
//
// A predicted time is piecewise linear in the constants: linear once it is
// known which pairs bound each step and whether a link's wire time or the
// transport's own work bounds each byte (allreduce_model.cc). So the fit
// alternates: evaluate every measurement's LinearCost at the current
// constants (which fixes those choices), solve the linear least-squares
// problem for the constants, and repeat until the constants stop moving
// (a Gauss-Newton iteration on a piecewise-linear model).
//
// The linear problem, in relative terms (every size weighs the same):
// unknown u_j = theta_j / s_j with s_j the starting value of term j (or a
// small scale when it starts at 0); row i, weighted by w_i = 1 /
// sqrt(t_i p_i) with t_i measured and p_i the previous iteration's
// prediction: sum_j coef_ij s_j u_j w_i = (t_i - fixed_i - other terms_i)
// w_i; plus ridge rows sqrt(lambda) u_j = sqrt(lambda) (towards the
// start). At the fixed point the residuals are (p_i - t_i) / sqrt(t_i p_i),
// about log(p_i / t_i): predicting half the time costs as much as twice it
// (weighting by 1 / t_i alone bends the fit low on noisy data, since an
// under-prediction is never worse than -100%). Solved by the normal equations (at most
// 20 unknowns) with partial pivoting; a term that comes out negative is
// pinned to 0 and the rest solved again (an active-set non-negative fit).
#include "predict/fit.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "predict/json.h"
#include "predict/units.h"

namespace kolo::predict {
namespace {

std::vector<std::string> splitCsv(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, ',')) {
    while (!cell.empty() && (cell.back() == '\r' || cell.back() == ' ')) cell.pop_back();
    while (!cell.empty() && cell.front() == ' ') cell.erase(cell.begin());
    out.push_back(cell);
  }
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

// Solves A x = y (n x n, row-major) in place; false when singular.
bool solve(std::vector<double>& a, std::vector<double>& y, int n) {
  for (int col = 0; col < n; ++col) {
    int pivot = col;
    for (int r = col + 1; r < n; ++r) {
      if (std::fabs(a[r * n + col]) > std::fabs(a[pivot * n + col])) pivot = r;
    }
    if (std::fabs(a[pivot * n + col]) < 1e-300) return false;
    if (pivot != col) {
      for (int k = 0; k < n; ++k) std::swap(a[col * n + k], a[pivot * n + k]);
      std::swap(y[col], y[pivot]);
    }
    for (int r = 0; r < n; ++r) {
      if (r == col) continue;
      const double f = a[r * n + col] / a[col * n + col];
      if (f == 0) continue;
      for (int k = col; k < n; ++k) a[r * n + k] -= f * a[col * n + k];
      y[r] -= f * y[col];
    }
  }
  for (int i = 0; i < n; ++i) y[i] /= a[i * n + i];
  return true;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

std::vector<Measurement> parseMeasurements(std::string_view text,
                                           std::string_view source) {
  std::vector<Measurement> out;
  std::istringstream in{std::string(text)};
  std::string line;
  int lineNo = 0;
  bool header = false;
  const std::string where(source);
  auto fail = [&](const std::string& what) {
    throw FitError(where + ":" + std::to_string(lineNo) + ": " + what);
  };
  while (std::getline(in, line)) {
    ++lineNo;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    if (!header) {
      if (line != kMeasurementHeader) {
        fail("expected the header '" + std::string(kMeasurementHeader) + "', got '" +
             line + "'");
      }
      header = true;
      continue;
    }
    const auto cells = splitCsv(line);
    if (cells.size() != 7) {
      fail("expected 7 fields (" + std::string(kMeasurementHeader) + "), got " +
           std::to_string(cells.size()));
    }
    Measurement m;
    m.transport = cells[0];
    if (m.transport != "shm" && m.transport != "auto" && m.transport != "tcp" &&
        m.transport != "mpi") {
      fail("transport '" + m.transport + "': expected shm, auto, tcp or mpi");
    }
    auto positiveInt = [&](const std::string& field, const std::string& text) {
      char* stop = nullptr;
      const long v = std::strtol(text.c_str(), &stop, 10);
      if (text.empty() || *stop != '\0' || v < 1 || v > 1 << 20) {
        fail(field + " '" + text + "': expected a whole number >= 1");
      }
      return static_cast<int>(v);
    };
    m.hosts = positiveInt("hosts", cells[1]);
    m.ranksPerHost = positiveInt("ranks_per_host", cells[2]);
    try {
      m.linkBps = parseRate("link_bps", cells[3]);
      m.bytes = parseBytes("bytes", cells[5]);
    } catch (const UnitError& e) {
      fail(e.what());
    }
    const auto a = algorithmFromName(cells[4]);
    if (!a) fail("algorithm '" + cells[4] + "': expected ring, rhd, tree, hier or shm");
    m.algorithm = *a;
    char* stop = nullptr;
    m.seconds = std::strtod(cells[6].c_str(), &stop);
    if (cells[6].empty() || *stop != '\0' || !(m.seconds > 0) ||
        !std::isfinite(m.seconds)) {
      fail("seconds '" + cells[6] + "': expected a positive number of seconds");
    }
    if (m.hosts * m.ranksPerHost < 2) fail("a measurement needs at least 2 ranks");
    out.push_back(m);
  }
  if (!header)
    throw FitError(where + ": empty (no header '" + std::string(kMeasurementHeader) +
                   "')");
  return out;
}

std::vector<Measurement> readMeasurements(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw FitError("cannot read the measurement file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return parseMeasurements(text.str(), path);
}

std::string measurementLine(const Measurement& m) {
  std::ostringstream os;
  os << m.transport << "," << m.hosts << "," << m.ranksPerHost << ","
     << jsonNumber(m.linkBps) << "," << toString(m.algorithm) << "," << m.bytes << ","
     << jsonNumber(m.seconds);
  return os.str();
}

JobShape shapeOf(const Measurement& m, int cores, bool hostsShareCores, double linkBurst,
                 double spinSeconds) {
  JobShape s;
  s.ranks = m.hosts * m.ranksPerHost;
  s.ranksPerHost = m.ranksPerHost;
  s.linkBps = m.linkBps;
  if (m.transport == "tcp") {
    s.intra = s.inter = Path::kTcp;
  } else if (m.transport == "mpi") {
    s.intra = s.inter = Path::kMpi;
  } else {
    s.intra = Path::kShm;
    s.inter = Path::kTcp;
  }
  s.shmArena = (m.transport == "shm" || m.transport == "auto") && m.hosts == 1;
  s.coresPerHost = cores;
  s.hostsShareCores = hostsShareCores;
  s.linkBurst = linkBurst;
  s.spinSeconds = spinSeconds;
  return s;
}

FitResult fitConstants(const std::vector<Measurement>& data, const Constants& start,
                       const FitOptions& options) {
  if (data.empty()) throw FitError("no measurements to fit");
  CostOptions costOptions;
  costOptions.agreement = options.agreement;
  std::vector<JobShape> shapes;
  for (const auto& m : data)
    shapes.push_back(shapeOf(m, options.cores, options.hostsShareCores, options.linkBurst,
                             options.spinSeconds));

  FitResult result;
  Constants theta = start;
  // The terms the data depends on (at the start; a term never touched
  // stays as it was).
  std::vector<int> terms;  // p * kTerms + t
  {
    std::vector<bool> touched(kPaths * kTerms, false);
    for (size_t i = 0; i < data.size(); ++i) {
      const LinearCost lc =
          allreduceCost(data[i].algorithm, data[i].bytes, shapes[i], theta, costOptions);
      for (int p = 0; p < kPaths; ++p) {
        for (int t = 0; t < kTerms; ++t) {
          if (lc.coef[p][t] != 0) touched[p * kTerms + t] = true;
        }
      }
    }
    for (int j = 0; j < kPaths * kTerms; ++j) {
      if (touched[j]) terms.push_back(j);
    }
  }
  if (terms.empty()) throw FitError("the measurements depend on no constant");
  const int nt = static_cast<int>(terms.size());
  // A term that starts at 0 has no prior: no pull, and a typical size
  // (microseconds; fractions of a nanosecond per byte) for its scale.
  std::vector<double> scale(nt), pull(nt);
  for (int j = 0; j < nt; ++j) {
    const double v = start.paths[terms[j] / kTerms].value[terms[j] % kTerms];
    const Term t = static_cast<Term>(terms[j] % kTerms);
    const double typical = t == Term::kBeta || t == Term::kGamma ? 1e-10 : 1e-6;
    scale[j] = v > 0 ? v : typical;
    pull[j] = v > 0 ? options.ridge : 0;
  }
  auto value = [&](Constants& c, int j) -> double& {
    return c.paths[terms[j] / kTerms].value[terms[j] % kTerms];
  };

  for (int iter = 0; iter < options.maxIterations; ++iter) {
    result.iterations = iter + 1;
    std::vector<std::vector<double>> rows;
    std::vector<double> rhs;
    for (size_t i = 0; i < data.size(); ++i) {
      const LinearCost lc =
          allreduceCost(data[i].algorithm, data[i].bytes, shapes[i], theta, costOptions);
      const double predicted = lc.seconds(theta);
      const double t =
          std::sqrt(data[i].seconds * (predicted > 0 ? predicted : data[i].seconds));
      double known = lc.fixed;
      std::vector<double> row(nt, 0);
      std::vector<bool> isFitted(kPaths * kTerms, false);
      for (int j = 0; j < nt; ++j) {
        row[j] = lc.coef[terms[j] / kTerms][terms[j] % kTerms] * scale[j] / t;
        isFitted[terms[j]] = true;
      }
      for (int p = 0; p < kPaths; ++p) {
        for (int q = 0; q < kTerms; ++q) {
          if (!isFitted[p * kTerms + q]) known += lc.coef[p][q] * theta.paths[p].value[q];
        }
      }
      rows.push_back(std::move(row));
      rhs.push_back((data[i].seconds - known) / t);
    }
    // Active-set non-negative solve.
    std::vector<bool> pinned(nt, false);
    std::vector<double> u(nt, 0);
    for (int round = 0; round <= nt; ++round) {
      std::vector<int> free;
      for (int j = 0; j < nt; ++j) {
        if (!pinned[j]) free.push_back(j);
      }
      const int nf = static_cast<int>(free.size());
      if (nf == 0) break;
      std::vector<double> ata(nf * nf, 0), aty(nf, 0);
      for (size_t i = 0; i < rows.size(); ++i) {
        for (int a = 0; a < nf; ++a) {
          const double ra = rows[i][free[a]];
          if (ra == 0) continue;
          aty[a] += ra * rhs[i];
          for (int b = 0; b < nf; ++b) ata[a * nf + b] += ra * rows[i][free[b]];
        }
      }
      for (int a = 0; a < nf; ++a) {
        ata[a * nf + a] += pull[free[a]] + 1e-12;  // (+ a little: never singular)
        aty[a] += pull[free[a]];                   // towards u = 1 (the start)
      }
      if (!solve(ata, aty, nf)) throw FitError("the fit's equations are singular");
      bool negative = false;
      std::fill(u.begin(), u.end(), 0);
      for (int a = 0; a < nf; ++a) {
        u[free[a]] = aty[a];
        if (aty[a] < 0) {
          pinned[free[a]] = true;
          negative = true;
        }
      }
      if (!negative) break;
    }
    double change = 0;
    for (int j = 0; j < nt; ++j) {
      const double next = std::max(0.0, u[j]) * scale[j];
      double& cur = value(theta, j);
      change =
          std::max(change, std::fabs(next - cur) / std::max(scale[j], std::fabs(cur)));
      cur = next;
    }
    if (change < 1e-6) break;
  }

  result.constants = theta;
  for (int j = 0; j < nt; ++j) {
    result.fitted.emplace_back(static_cast<Path>(terms[j] / kTerms),
                               static_cast<Term>(terms[j] % kTerms));
  }
  std::vector<double> errors;
  for (size_t i = 0; i < data.size(); ++i) {
    const double p =
        allreduceSeconds(data[i].algorithm, data[i].bytes, shapes[i], theta, costOptions);
    result.predicted.push_back(p);
    errors.push_back(std::fabs(p - data[i].seconds) / data[i].seconds);
  }
  result.medianRelativeError = median(errors);
  result.maxRelativeError = *std::max_element(errors.begin(), errors.end());
  return result;
}

}  // namespace kolo::predict
