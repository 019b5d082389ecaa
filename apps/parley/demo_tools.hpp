// The built-in demo tools of `parley ask --tools demo` (and `parley chat`): a calculator, the
// current time and a deterministic fake weather report. They match the tools the mock's demo
// agent calls (docs/mock.md), so a newcomer sees the tool loop work offline.
#pragma once

#include <string_view>

#include "parley/tools.hpp"

namespace parley::cli {

// Registers calculate {expression}, get_time {} and get_weather {city}.
void addDemoTools(ToolRegistry& registry);

// Evaluates an arithmetic expression: numbers, + - * / % ^ (power, right-associative), unary
// minus and parentheses. Throws ValidationError("expression", ...) naming the problem (a bad
// token, a division by zero, trailing input).
double evaluateExpression(std::string_view expression);

}  // namespace parley::cli
