// A small JSON reader and writer for kolo-predict's files (the constants
// file) and its --json output: objects, arrays, strings, numbers, true,
// false and null; no dependency.
//
// parseJson throws JsonError naming `source` (a file name, or what the text
// is) with the line and column of the first thing wrong.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kolo::predict {

class JsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::map<std::string, JsonValue> object;  // keys in sorted order

  bool isObject() const { return kind == Kind::kObject; }
  bool isNumber() const { return kind == Kind::kNumber; }
  bool isString() const { return kind == Kind::kString; }
  // The member `key` of an object, or null when absent (or not an object).
  const JsonValue* find(std::string_view key) const;
};

JsonValue parseJson(std::string_view text, std::string_view source);

// `s` as a JSON string literal, quotes included.
std::string jsonQuote(std::string_view s);
// A number as JSON: shortest round-trip form ("%.17g"-exact), never inf/nan
// (written as null).
std::string jsonNumber(double v);

}  // namespace kolo::predict
