#include "demo_tools.hpp"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>

#include "parley/errors.hpp"

namespace parley::cli {
namespace {

// A recursive-descent parser over the grammar
//   sum := product (('+'|'-') product)*
//   product := power (('*'|'/'|'%') power)*
//   power := unary ('^' power)?
//   unary := '-' unary | '+' unary | atom
//   atom := number | '(' sum ')'
class ExpressionParser {
 public:
  explicit ExpressionParser(std::string_view text) : text_(text) {}

  double parse() {
    double value = sum();
    skipSpace();
    if (pos_ != text_.size()) fail("unexpected '" + std::string(1, text_[pos_]) + "'");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& reason) const {
    throw ValidationError("expression", reason + " at position " + std::to_string(pos_));
  }

  void skipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
  }

  bool take(char c) {
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  double sum() {
    double value = product();
    for (;;) {
      if (take('+')) {
        value += product();
      } else if (take('-')) {
        value -= product();
      } else {
        return value;
      }
    }
  }

  double product() {
    double value = power();
    for (;;) {
      if (take('*')) {
        value *= power();
      } else if (take('/')) {
        double divisor = power();
        if (divisor == 0) fail("division by zero");
        value /= divisor;
      } else if (take('%')) {
        double divisor = power();
        if (divisor == 0) fail("division by zero");
        value = std::fmod(value, divisor);
      } else {
        return value;
      }
    }
  }

  double power() {
    double base = unary();
    if (take('^')) return std::pow(base, power());
    return base;
  }

  double unary() {
    if (take('-')) return -unary();
    if (take('+')) return unary();
    return atom();
  }

  double atom() {
    if (take('(')) {
      double value = sum();
      if (!take(')')) fail("missing ')'");
      return value;
    }
    skipSpace();
    const size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isdigit(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.')) {
      ++pos_;
    }
    if (start == pos_) {
      if (pos_ == text_.size()) fail("unexpected end");
      fail("unexpected '" + std::string(1, text_[pos_]) + "'");
    }
    const std::string number(text_.substr(start, pos_ - start));
    size_t used = 0;
    double value = 0;
    try {
      value = std::stod(number, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != number.size()) fail("bad number '" + number + "'");
    return value;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// Integers print without a fraction; others with up to 12 significant digits.
nlohmann::json numberJson(double value) {
  if (std::isfinite(value) && std::fabs(value) < 1e15 && value == std::floor(value)) {
    return static_cast<int64_t>(value);
  }
  return value;
}

}  // namespace

double evaluateExpression(std::string_view expression) {
  return ExpressionParser(expression).parse();
}

void addDemoTools(ToolRegistry& registry) {
  registry.add(
      "calculate", "Evaluate an arithmetic expression (+ - * / % ^ and parentheses)",
      {{"type", "object"},
       {"properties", {{"expression", {{"type", "string"}, {"description", "e.g. (2 + 3) * 4"}}}}},
       {"required", {"expression"}}},
      [](const nlohmann::json& args, ToolContext&) -> nlohmann::json {
        const std::string expression = args.at("expression").get<std::string>();
        return {{"expression", expression}, {"result", numberJson(evaluateExpression(expression))}};
      });
  registry.add("get_time", "The current date and time (UTC, ISO 8601)",
               {{"type", "object"}, {"properties", nlohmann::json::object()}},
               [](const nlohmann::json&, ToolContext&) -> nlohmann::json {
                 const std::time_t now =
                     std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
                 std::tm utc{};
                 gmtime_r(&now, &utc);
                 char text[32];
                 std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
                 return {{"utc", text}};
               });
  registry.add(
      "get_weather", "Today's weather in a city (a demo: made up, the same for a city every time)",
      {{"type", "object"},
       {"properties", {{"city", {{"type", "string"}}}}},
       {"required", {"city"}}},
      [](const nlohmann::json& args, ToolContext&) -> nlohmann::json {
        const std::string city = args.at("city").get<std::string>();
        // A fixed hash of the lower-cased name (FNV-1a) picks the report, so tests can rely on it.
        uint32_t hash = 2166136261u;
        for (char c : city) {
          hash ^= static_cast<unsigned char>(std::tolower(static_cast<unsigned char>(c)));
          hash *= 16777619u;
        }
        static constexpr const char* kSkies[] = {"sunny", "cloudy", "rainy", "windy", "snowy"};
        return {{"city", city},
                {"conditions", kSkies[hash % 5]},
                {"temperature_c", static_cast<int>(hash / 5 % 35) - 5}};
      });
}

}  // namespace parley::cli
