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

// Clears every KOLO_* setting variable so that defaults apply.
class SettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& d : Settings::describe()) cleared_.emplace_back(d.env, std::nullopt);
  }
  std::vector<ScopedEnv> cleared_;
};

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
#define KOLO_SETTING_COMPARE(type, field, envName, def, doc) \
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

// docs/env.md, found from this source file's location (tests/ -> docs/).
std::string readEnvDoc() {
  std::filesystem::path path =
      std::filesystem::path(__FILE__).parent_path().parent_path() / "docs" / "env.md";
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

TEST(SettingsDocTest, EnvDocListsEverySettingWithDefaultAndDoc) {
  const std::string doc = readEnvDoc();
  ASSERT_FALSE(doc.empty());
  std::istringstream lines(doc);
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) == 0) rows.push_back(line);
  }
  for (const auto& d : Settings::describe()) {
    const std::string def =
        d.defaultValue.empty() ? "(empty)" : "`" + d.defaultValue + "`";
    const std::string expected =
        "| `" + d.env + "` | " + def + " | " + escapeForTable(d.doc) + " |";
    const std::string* found = nullptr;
    for (const auto& row : rows) {
      if (row.rfind("| `" + d.env + "` |", 0) == 0) found = &row;
    }
    ASSERT_NE(found, nullptr) << d.env << " is missing from docs/env.md; add the row\n"
                              << expected;
    EXPECT_EQ(*found, expected) << "docs/env.md is out of date for " << d.env;
  }
}

}  // namespace
}  // namespace kolo
