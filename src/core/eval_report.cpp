// Evaluation reports (parley/eval.hpp): JSON, JUnit XML and the text table.
#include <algorithm>
#include <sstream>
#include <vector>

#include "parley/eval.hpp"

namespace parley::eval {

namespace {

using nlohmann::json;

std::string xmlEscaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        // XML 1.0 has no place for the other C0 controls.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string firstFailure(const CaseResult& c) {
  for (const ScoreResult& s : c.scores) {
    if (!s.passed) return s.scorer + ": " + s.detail;
  }
  return {};
}

std::string oneLine(std::string text, size_t max) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  if (text.size() > max) text = text.substr(0, max - 3) + "...";
  return text;
}

}  // namespace

json toJson(const EvalReport& report) {
  json cases = json::array();
  for (const CaseResult& c : report.cases) {
    json calls = json::array();
    for (const ToolCall& call : c.toolCalls) {
      calls.push_back({{"name", call.name}, {"arguments", call.arguments}});
    }
    json scores = json::array();
    for (const ScoreResult& s : c.scores) {
      scores.push_back({{"scorer", s.scorer}, {"passed", s.passed}, {"detail", s.detail}});
    }
    cases.push_back({{"id", c.id},
                     {"passed", c.passed},
                     {"answer", c.answer},
                     {"tool_calls", std::move(calls)},
                     {"usage", toJson(c.usage)},
                     {"cost", c.cost ? json(*c.cost) : json()},
                     {"latency_ms", c.latency.count()},
                     {"error", c.error},
                     {"scores", std::move(scores)}});
    if (!c.fork.empty()) cases.back()["fork"] = c.fork;
  }
  return {{"label", report.label},
          {"passed", report.passed},
          {"failed", report.failed},
          {"wall_ms", report.wall.count()},
          {"cases", std::move(cases)}};
}

std::string toJUnitXml(const std::vector<EvalReport>& reports) {
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n";
  for (const EvalReport& r : reports) {
    out << "  <testsuite name=\"" << xmlEscaped(r.label.empty() ? "parley eval" : r.label)
        << "\" tests=\"" << r.cases.size() << "\" failures=\"" << r.failed << "\" time=\""
        << static_cast<double>(r.wall.count()) / 1000.0 << "\">\n";
    for (const CaseResult& c : r.cases) {
      out << "    <testcase name=\"" << xmlEscaped(c.id) << "\" classname=\""
          << xmlEscaped(r.label.empty() ? "eval" : r.label) << "\" time=\""
          << static_cast<double>(c.latency.count()) / 1000.0 << "\"";
      if (c.passed) {
        out << "/>\n";
        continue;
      }
      out << ">\n";
      for (const ScoreResult& s : c.scores) {
        if (s.passed) continue;
        out << "      <failure type=\"" << xmlEscaped(s.scorer) << "\" message=\""
            << xmlEscaped(oneLine(s.detail, 500)) << "\"/>\n";
      }
      out << "    </testcase>\n";
    }
    out << "  </testsuite>\n";
  }
  out << "</testsuites>\n";
  return out.str();
}

std::string formatTable(const std::vector<EvalReport>& reports) {
  if (reports.empty()) return {};
  size_t idWidth = 4;
  for (const CaseResult& c : reports.front().cases)
    idWidth = std::max(idWidth, c.id.size());
  idWidth = std::min<size_t>(idWidth, 40);
  std::ostringstream out;
  auto pad = [](std::string text, size_t width) {
    text = oneLine(std::move(text), width);
    return text + std::string(width - std::min(width, text.size()), ' ');
  };
  // A column as wide as its label (up to 40), so that two labels that differ only at the end
  // (--compare-system's "(system A)", "(system B)") stay apart.
  std::vector<size_t> widths;
  widths.reserve(reports.size());
  for (const EvalReport& r : reports)
    widths.push_back(std::clamp<size_t>(r.label.size(), 12, 40));
  out << pad("case", idWidth);
  for (size_t k = 0; k < reports.size(); ++k)
    out << "  " << pad(reports[k].label.empty() ? "result" : reports[k].label, widths[k]);
  out << "  detail\n";
  for (size_t i = 0; i < reports.front().cases.size(); ++i) {
    out << pad(reports.front().cases[i].id, idWidth);
    std::string detail;
    for (size_t k = 0; k < reports.size(); ++k) {
      const EvalReport& r = reports[k];
      const CaseResult& c = r.cases[i];
      out << "  " << pad(c.passed ? "PASS" : "FAIL", widths[k]);
      if (detail.empty() && !c.passed) {
        detail = (reports.size() > 1 ? r.label + ": " : std::string()) + firstFailure(c);
      }
    }
    out << "  " << oneLine(detail, 100) << "\n";
  }
  return out.str();
}

}  // namespace parley::eval
