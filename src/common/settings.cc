#include "common/settings.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>

#include "common/check.h"

namespace kolo {
namespace {

void parseInto(const char* env, const char* text, double* out) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || v < 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               env << "='" << text << "' is not a non-negative number");
  }
  *out = v;
}

void parseInto(const char* env, const char* text, int64_t* out) {
  char* end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               env << "='" << text << "' is not a non-negative integer");
  }
  *out = v;
}

void parseInto(const char*, const char* text, std::string* out) {
  *out = text;
}

template <typename T>
std::string show(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The variable's value, or null when it is unset or empty.
const char* nonEmptyEnv(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// Horovod's log levels onto kolo's (which has no trace and no fatal).
std::string logLevelFromHorovod(const char* env, const char* text) {
  const std::string level = lower(text);
  if (level == "trace") return "debug";
  if (level == "fatal") return "error";
  for (const char* known : {"debug", "info", "warning", "warn", "error"}) {
    if (level == known) return level;
  }
  KOLO_THROW(ErrorCode::kInvalidArgument,
             env << "='" << text
                 << "' is not a log level (expected trace, debug, info, warning, error "
                    "or fatal)");
}

// The alias's value in the setting's terms.
std::string convertAlias(const SettingAlias& alias, const char* text) {
  switch (alias.form) {
    case AliasForm::kLogLevel: return logLevelFromHorovod(alias.env, text);
    case AliasForm::kTimeline: return std::string_view(text) == "DYNAMIC" ? "" : text;
    case AliasForm::kNone:
    case AliasForm::kSame: break;
  }
  return text;
}

// The KOLO_ variable when set, else the Horovod alias (converted).
template <typename T>
void readSetting(const char* env, const SettingAlias& alias, T* out) {
  if (const char* v = nonEmptyEnv(env); v != nullptr) return parseInto(env, v, out);
  if (alias.form == AliasForm::kNone) return;
  if (const char* v = nonEmptyEnv(alias.env); v != nullptr) {
    parseInto(alias.env, convertAlias(alias, v).c_str(), out);
  }
}

std::string aliasNote(AliasForm form) {
  switch (form) {
    case AliasForm::kLogLevel: return "trace is debug, fatal is error";
    case AliasForm::kTimeline: return "DYNAMIC: no file until start_timeline()";
    case AliasForm::kNone:
    case AliasForm::kSame: break;
  }
  return "";
}

Settings::Description describeSetting(const char* env, std::string defaultValue,
                                      const char* doc, const SettingAlias& alias) {
  return {env, std::move(defaultValue), doc, alias.env, aliasNote(alias.form)};
}

bool accepts(std::string_view accepted, const char* value) {
  if (accepted == "*") return true;
  const std::string v = lower(value);
  std::istringstream list{std::string(accepted)};
  for (std::string item; std::getline(list, item, ',');) {
    if (lower(item) == v) return true;
  }
  return false;
}

// A set Horovod variable that no setting stands for: a note when its value
// is accepted (and ignored), else an error.
void checkUnhonoured(const char* env, const char* accepted, const char* reason,
                     std::vector<std::string>* notes) {
  const char* v = nonEmptyEnv(env);
  if (v == nullptr) return;
  if (!accepts(accepted, v)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               env << "='" << v << "' is not supported by kolo"
                   << (*accepted != '\0' ? std::string(" (accepted: ") + accepted + ")"
                                         : std::string())
                   << ": " << reason);
  }
  notes->push_back(std::string(env) + "='" + v + "' is ignored: " + reason);
}

}  // namespace

Settings Settings::fromEnvironment() {
  Settings s;
#define KOLO_SETTING_READ(type, field, env, def, alias, doc) \
  readSetting(env, alias, &s.field);
  KOLO_SETTINGS(KOLO_SETTING_READ)
#undef KOLO_SETTING_READ
#define KOLO_HOROVOD_CHECK(env, accepted, reason) \
  checkUnhonoured(env, accepted, reason, &s.ignoredHorovod);
  KOLO_HOROVOD_UNHONOURED(KOLO_HOROVOD_CHECK)
#undef KOLO_HOROVOD_CHECK
  return s;
}

std::vector<Settings::Description> Settings::describe() {
  std::vector<Description> out;
  Settings defaults;
#define KOLO_SETTING_DESCRIBE(type, field, name, def, alias, doc) \
  out.push_back(describeSetting(name, show(defaults.field), doc, alias));
  KOLO_SETTINGS(KOLO_SETTING_DESCRIBE)
#undef KOLO_SETTING_DESCRIBE
  return out;
}

std::vector<Settings::HorovodVariable> Settings::describeHorovod() {
  std::vector<HorovodVariable> out;
#define KOLO_HOROVOD_DESCRIBE(env, accepted, reason) \
  out.push_back({env, accepted, reason});
  KOLO_HOROVOD_UNHONOURED(KOLO_HOROVOD_DESCRIBE)
#undef KOLO_HOROVOD_DESCRIBE
  return out;
}

std::string Settings::resolveJobSecret() const {
  if (!jobSecret.empty() || jobSecretFile.empty()) return jobSecret;
  std::ifstream in(jobSecretFile, std::ios::binary);
  if (!in) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "KOLO_JOB_SECRET_FILE='" << jobSecretFile << "' cannot be read");
  }
  std::string secret((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  if (secret.empty()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "KOLO_JOB_SECRET_FILE='" << jobSecretFile << "' is empty");
  }
  return secret;
}

}  // namespace kolo
