// kolo::Settings: parsing from the environment, and docs/env.md listing
// every setting with its default and doc.
#include "common/settings.h"

#include <gtest/gtest.h>
#include <kolo/error.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace kolo {
namespace {

// Sets (or unsets) one variable for the scope, restoring the old value.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str()); old != nullptr) old_ = old;
    if (value) {
      setenv(name_.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Clears every KOLO_* setting variable, its Horovod alias and the Horovod
// variables kolo does not honour, so that defaults apply.
class SettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& d : Settings::describe()) {
      cleared_.emplace_back(d.env, std::nullopt);
      if (!d.alias.empty()) cleared_.emplace_back(d.alias, std::nullopt);
    }
    for (const auto& h : Settings::describeHorovod()) {
      cleared_.emplace_back(h.env, std::nullopt);
    }
  }
  std::vector<ScopedEnv> cleared_;
};

template <typename T>
std::string show(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// The value of the setting read from `env`, as text.
std::string fieldText(const Settings& s, const std::string& env) {
#define KOLO_SETTING_TEXT(type, field, envName, def, alias, doc) \
  if (env == envName) return show(s.field);
  KOLO_SETTINGS(KOLO_SETTING_TEXT)
#undef KOLO_SETTING_TEXT
  ADD_FAILURE() << "no setting reads " << env;
  return "";
}

// The Error fromEnvironment() throws, or a failure when it does not throw.
std::optional<Error> parseError() {
  try {
    Settings::fromEnvironment();
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

TEST_F(SettingsTest, DefaultsWhenUnset) {
  Settings s = Settings::fromEnvironment();
  Settings defaults;
  EXPECT_EQ(s.timeoutSeconds, defaults.timeoutSeconds);
  EXPECT_EQ(s.timeoutSeconds, 30.0);
  EXPECT_EQ(s.connectTimeoutSeconds, defaults.connectTimeoutSeconds);
  EXPECT_EQ(s.transport, "auto");
  EXPECT_EQ(s.allreduceAlgorithm, "");
  EXPECT_EQ(s.shmChunkBytes, defaults.shmChunkBytes);
  EXPECT_EQ(s.logLevel, defaults.logLevel);
}

TEST_F(SettingsTest, EmptyValueKeepsTheDefault) {
  ScopedEnv timeout("KOLO_TIMEOUT", "");
  ScopedEnv transport("KOLO_TRANSPORT", "");
  Settings s = Settings::fromEnvironment();
  EXPECT_EQ(s.timeoutSeconds, Settings().timeoutSeconds);
  EXPECT_EQ(s.transport, Settings().transport);
}

TEST_F(SettingsTest, ParsesEachType) {
  ScopedEnv timeout("KOLO_TIMEOUT", "2.5");
  ScopedEnv connect("KOLO_CONNECT_TIMEOUT", "0");
  ScopedEnv chunk("KOLO_SHM_CHUNK_BYTES", "1048576");
  ScopedEnv transport("KOLO_TRANSPORT", "tcp");
  ScopedEnv algo("KOLO_ALLREDUCE_ALGO", "ring");
  Settings s = Settings::fromEnvironment();
  EXPECT_DOUBLE_EQ(s.timeoutSeconds, 2.5);
  EXPECT_DOUBLE_EQ(s.connectTimeoutSeconds, 0.0);
  EXPECT_EQ(s.shmChunkBytes, 1048576);
  EXPECT_EQ(s.transport, "tcp");
  EXPECT_EQ(s.allreduceAlgorithm, "ring");
}

TEST_F(SettingsTest, EveryDefaultParsesBackToItself) {
  // Setting each variable to its documented default changes nothing.
  const Settings defaults;
  std::vector<ScopedEnv> env;
  for (const auto& d : Settings::describe()) {
    if (!d.defaultValue.empty()) env.emplace_back(d.env, d.defaultValue);
  }
  Settings s = Settings::fromEnvironment();
  // Field by field, through the settings list itself.
#define KOLO_SETTING_COMPARE(type, field, envName, def, alias, doc) \
  EXPECT_EQ(s.field, defaults.field) << envName;
  KOLO_SETTINGS(KOLO_SETTING_COMPARE)
#undef KOLO_SETTING_COMPARE
}

struct BadValue {
  const char* env;
  const char* value;
};

void PrintTo(const BadValue& bad, std::ostream* os) {
  *os << bad.env << "='" << bad.value << "'";
}

// "KOLO_TIMEOUT_soon": the test name's suffix, letters, digits and '_' only.
std::string badValueName(const ::testing::TestParamInfo<BadValue>& info) {
  std::string name = std::string(info.param.env) + "_";
  for (const char* c = info.param.value; *c != '\0'; ++c) {
    name += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
  }
  return name + "_" + std::to_string(info.index);
}

class SettingsBadValueTest : public SettingsTest,
                             public ::testing::WithParamInterface<BadValue> {};

TEST_P(SettingsBadValueTest, MalformedValueNamesVariableAndValue) {
  const BadValue& bad = GetParam();
  ScopedEnv env(bad.env, bad.value);
  auto error = parseError();
  ASSERT_TRUE(error.has_value()) << bad.env << "='" << bad.value << "' was accepted";
  EXPECT_EQ(error->code(), ErrorCode::kInvalidArgument);
  std::string what = error->what();
  EXPECT_NE(what.find(bad.env), std::string::npos) << what;
  EXPECT_NE(what.find(std::string("'") + bad.value + "'"), std::string::npos) << what;
  // The variable actually read, and only it: a Horovod alias's error does
  // not name the kolo variable it stands for.
  if (std::string(bad.env).rfind("HOROVOD_", 0) == 0) {
    EXPECT_EQ(what.find("KOLO_"), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Numbers, SettingsBadValueTest,
                         ::testing::Values(BadValue{"KOLO_TIMEOUT", "soon"},
                                           BadValue{"KOLO_TIMEOUT", "-1"},
                                           BadValue{"KOLO_TIMEOUT", "3s"},
                                           BadValue{"KOLO_TIMEOUT", " "},
                                           BadValue{"KOLO_CONNECT_TIMEOUT", "1e"},
                                           BadValue{"KOLO_SHM_CHUNK_BYTES", "12x"},
                                           BadValue{"KOLO_SHM_CHUNK_BYTES", "1.5"},
                                           BadValue{"KOLO_SHM_CHUNK_BYTES", "-4096"},
                                           BadValue{"KOLO_SPIN_US", "abc"},
                                           BadValue{"KOLO_TCP_BUFFER_BYTES", "4M"}),
                         badValueName);

// A malformed Horovod alias is named itself, not the KOLO_ variable.
INSTANTIATE_TEST_SUITE_P(
    HorovodAliases, SettingsBadValueTest,
    ::testing::Values(BadValue{"HOROVOD_FUSION_THRESHOLD", "64MB"},
                      BadValue{"HOROVOD_CYCLE_TIME", "fast"},
                      BadValue{"HOROVOD_CACHE_CAPACITY", "-1"},
                      BadValue{"HOROVOD_STALL_CHECK_TIME_SECONDS", "1m"},
                      BadValue{"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "-5"},
                      BadValue{"HOROVOD_STALL_CHECK_DISABLE", "yes"},
                      BadValue{"HOROVOD_HIERARCHICAL_ALLREDUCE", "true"},
                      BadValue{"HOROVOD_AUTOTUNE", "on"},
                      BadValue{"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "2.5"},
                      BadValue{"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "x"},
                      BadValue{"HOROVOD_TIMELINE_MARK_CYCLES", "-1"},
                      BadValue{"HOROVOD_GLOO_TIMEOUT_SECONDS", "30s"},
                      BadValue{"HOROVOD_LOG_LEVEL", "verbose"}),
    badValueName);

// ---- Horovod's variables ------------------------------------------------------

struct AliasCase {
  const char* horovod;
  const char* kolo;
  const char* value;      // given to the Horovod variable
  const char* expected;   // the setting's value, as text
  const char* koloValue;  // given to the KOLO_ variable: it wins
};

// Every alias of settings.h, with its conversion where there is one.
const AliasCase kAliasCases[] = {
    {"HOROVOD_GLOO_TIMEOUT_SECONDS", "KOLO_TIMEOUT", "12", "12", "7"},
    {"HOROVOD_HIERARCHICAL_ALLREDUCE", "KOLO_HIERARCHICAL_ALLREDUCE", "1", "1", "0"},
    {"HOROVOD_GLOO_IFACE", "KOLO_IFACE", "eth1", "eth1", "lo"},
    {"HOROVOD_LOG_LEVEL", "KOLO_LOG_LEVEL", "TRACE", "debug", "error"},
    {"HOROVOD_LOG_LEVEL", "KOLO_LOG_LEVEL", "debug", "debug", "error"},
    {"HOROVOD_LOG_LEVEL", "KOLO_LOG_LEVEL", "Info", "info", "error"},
    {"HOROVOD_LOG_LEVEL", "KOLO_LOG_LEVEL", "WARNING", "warning", "error"},
    {"HOROVOD_LOG_LEVEL", "KOLO_LOG_LEVEL", "error", "error", "info"},
    {"HOROVOD_LOG_LEVEL", "KOLO_LOG_LEVEL", "FATAL", "error", "info"},
    // Bytes in both (horovodrun's --fusion-threshold-mb converts MiB).
    {"HOROVOD_FUSION_THRESHOLD", "KOLO_FUSION_THRESHOLD", "33554432", "33554432", "0"},
    // Milliseconds in both.
    {"HOROVOD_CYCLE_TIME", "KOLO_CYCLE_TIME", "3.5", "3.5", "1"},
    {"HOROVOD_CACHE_CAPACITY", "KOLO_CACHE_CAPACITY", "256", "256", "8"},
    // Seconds in both.
    {"HOROVOD_STALL_CHECK_TIME_SECONDS", "KOLO_STALL_WARNING", "20", "20", "5"},
    {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "KOLO_STALL_SHUTDOWN", "120", "120", "0"},
    {"HOROVOD_STALL_CHECK_DISABLE", "KOLO_STALL_CHECK_DISABLE", "1", "1", "0"},
    {"HOROVOD_TIMELINE", "KOLO_TIMELINE", "/tmp/t.json", "/tmp/t.json", "/tmp/k.json"},
    {"HOROVOD_TIMELINE", "KOLO_TIMELINE", "DYNAMIC", "", "/tmp/k.json"},
    {"HOROVOD_TIMELINE_MARK_CYCLES", "KOLO_TIMELINE_MARK_CYCLES", "1", "1", "0"},
    {"HOROVOD_AUTOTUNE", "KOLO_AUTOTUNE", "1", "1", "0"},
    {"HOROVOD_AUTOTUNE_LOG", "KOLO_AUTOTUNE_LOG", "/tmp/a.csv", "/tmp/a.csv",
     "/tmp/k.csv"},
    {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "KOLO_AUTOTUNE_WARMUP_SAMPLES", "3", "3", "1"},
    {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "KOLO_AUTOTUNE_STEPS_PER_SAMPLE", "10", "10",
     "4"},
};

TEST_F(SettingsTest, EveryAliasIsReadWhenTheKoloVariableIsUnset) {
  for (const AliasCase& c : kAliasCases) {
    ScopedEnv alias(c.horovod, c.value);
    Settings s = Settings::fromEnvironment();
    EXPECT_EQ(fieldText(s, c.kolo), c.expected) << c.horovod << "='" << c.value << "'";
  }
}

TEST_F(SettingsTest, TheKoloVariableWinsOverItsAlias) {
  for (const AliasCase& c : kAliasCases) {
    ScopedEnv alias(c.horovod, c.value);
    ScopedEnv kolo(c.kolo, c.koloValue);
    Settings s = Settings::fromEnvironment();
    EXPECT_EQ(fieldText(s, c.kolo), c.koloValue) << c.kolo << " and " << c.horovod;
  }
  // The alias is not even parsed then.
  ScopedEnv alias("HOROVOD_FUSION_THRESHOLD", "junk");
  ScopedEnv kolo("KOLO_FUSION_THRESHOLD", "100");
  EXPECT_EQ(Settings::fromEnvironment().fusionThresholdBytes, 100);
}

TEST_F(SettingsTest, EmptyAliasKeepsTheDefault) {
  ScopedEnv alias("HOROVOD_CYCLE_TIME", "");
  EXPECT_EQ(Settings::fromEnvironment().cycleTimeMs, Settings().cycleTimeMs);
}

TEST(SettingsAliasTest, EveryDeclaredAliasIsTested) {
  for (const auto& d : Settings::describe()) {
    if (d.alias.empty()) continue;
    bool tested = false;
    for (const AliasCase& c : kAliasCases) {
      tested = tested || (d.alias == c.horovod && d.env == c.kolo);
    }
    EXPECT_TRUE(tested) << d.alias << " (alias of " << d.env << ") has no case here";
    EXPECT_EQ(d.alias.rfind("HOROVOD_", 0), 0u) << d.alias;
  }
}

TEST_F(SettingsTest, UnhonouredHorovodValuesAreErrorsNamingVariableAndReason) {
  const std::pair<const char*, const char*> bad[] = {
      {"HOROVOD_CPU_OPERATIONS", "CCL"},
      {"HOROVOD_CONTROLLER", "nccl"},
      {"HOROVOD_ELASTIC", "1"},
      {"HOROVOD_MPI_THREADS_DISABLE", "1"},
      {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.0.0.1"},
  };
  for (const auto& [name, value] : bad) {
    ScopedEnv env(name, value);
    auto error = parseError();
    ASSERT_TRUE(error.has_value()) << name << "='" << value << "' was accepted";
    EXPECT_EQ(error->code(), ErrorCode::kInvalidArgument);
    const std::string what = error->what();
    EXPECT_NE(what.find(std::string(name) + "='" + value + "'"), std::string::npos)
        << what;
    EXPECT_NE(what.find("not supported by kolo"), std::string::npos) << what;
  }
  ScopedEnv ccl("HOROVOD_CPU_OPERATIONS", "ccl");
  EXPECT_NE(std::string(parseError()->what()).find("no oneCCL backend"),
            std::string::npos);
}

TEST_F(SettingsTest, AcceptedUnhonouredHorovodValuesAreIgnoredWithANote) {
  ScopedEnv cpu("HOROVOD_CPU_OPERATIONS", "gloo");  // any case
  ScopedEnv torus("HOROVOD_TORUS_ALLREDUCE", "1");
  ScopedEnv elastic("HOROVOD_ELASTIC", "0");
  ScopedEnv unset("HOROVOD_THREAD_AFFINITY", "");
  Settings s = Settings::fromEnvironment();
  ASSERT_EQ(s.ignoredHorovod.size(), 3u);
  EXPECT_EQ(s.ignoredHorovod[0].rfind("HOROVOD_CPU_OPERATIONS='gloo' is ignored: ", 0),
            0u)
      << s.ignoredHorovod[0];
  EXPECT_NE(s.ignoredHorovod[1].find("HOROVOD_TORUS_ALLREDUCE='1'"), std::string::npos);
  EXPECT_NE(s.ignoredHorovod[2].find("HOROVOD_ELASTIC='0'"), std::string::npos);
  EXPECT_TRUE(Settings().ignoredHorovod.empty());
}

TEST(SettingsAliasTest, NoHorovodVariableIsBothAnAliasAndUnhonoured) {
  for (const auto& h : Settings::describeHorovod()) {
    for (const auto& d : Settings::describe()) EXPECT_NE(h.env, d.alias) << h.env;
  }
}

// docs/env.md of the source tree the test was built from.
std::string readEnvDoc() {
  std::filesystem::path path =
      std::filesystem::path(KOLO_TEST_SOURCE_DIR) / "docs" / "env.md";
  if (const char* src = std::getenv("KOLO_SOURCE_DIR"); src != nullptr) {
    path = std::filesystem::path(src) / "docs" / "env.md";
  }
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string escapeForTable(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

// The table rows of docs/env.md ("| `NAME` | ...").
std::vector<std::string> envDocRows() {
  const std::string doc = readEnvDoc();
  EXPECT_FALSE(doc.empty());
  std::istringstream lines(doc);
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) == 0) rows.push_back(line);
  }
  return rows;
}

void expectRow(const std::vector<std::string>& rows, const std::string& name,
               const std::string& expected) {
  const std::string* found = nullptr;
  for (const auto& row : rows) {
    if (row.rfind("| `" + name + "` |", 0) == 0) found = &row;
  }
  ASSERT_NE(found, nullptr) << name << " is missing from docs/env.md; add the row\n"
                            << expected;
  EXPECT_EQ(*found, expected) << "docs/env.md is out of date for " << name;
}

TEST(SettingsDocTest, EnvDocListsEverySettingWithAliasDefaultAndDoc) {
  const auto rows = envDocRows();
  for (const auto& d : Settings::describe()) {
    const std::string def =
        d.defaultValue.empty() ? "(empty)" : "`" + d.defaultValue + "`";
    std::string alias = d.alias.empty() ? "(none)" : "`" + d.alias + "`";
    if (!d.aliasNote.empty()) alias += " (" + d.aliasNote + ")";
    expectRow(rows, d.env,
              "| `" + d.env + "` | " + alias + " | " + def + " | " +
                  escapeForTable(d.doc) + " |");
  }
}

std::string horovodValuesText(const std::string& accepted) {
  if (accepted == "*") return "any (ignored)";
  if (accepted.empty()) return "none: error when set";
  std::string out;
  std::istringstream list(accepted);
  for (std::string v; std::getline(list, v, ',');) {
    out += (out.empty() ? "`" : ", `") + v + "`";
  }
  return out + " (ignored); others: error";
}

TEST(SettingsDocTest, EnvDocListsEveryUnhonouredHorovodVariable) {
  const auto rows = envDocRows();
  for (const auto& h : Settings::describeHorovod()) {
    expectRow(rows, h.env,
              "| `" + h.env + "` | " + horovodValuesText(h.accepted) + " | " +
                  escapeForTable(h.reason) + " |");
  }
}

}  // namespace
}  // namespace kolo
