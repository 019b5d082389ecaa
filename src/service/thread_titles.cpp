#include "service/thread_titles.hpp"

#include <memory>

#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "service/run_follower.hpp"

namespace parley::service {

using json = nlohmann::json;

std::string proposedTitle(const std::string& text) {
  size_t start = 0;
  std::string line;
  while (start <= text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    line = text.substr(start, end - start);
    const size_t first = line.find_first_not_of(" \t\r");
    if (first != std::string::npos) {
      line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
      break;
    }
    line.clear();
    start = end + 1;
  }
  for (char& c : line)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  if (line.size() <= kProposedTitleBytes) return line;
  size_t cut = kProposedTitleBytes;
  while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80)
    --cut;  // not inside a UTF-8 sequence
  return line.substr(0, cut) + "\xE2\x80\xA6";
}

void createTitledThread(RunStore& runs, const std::string& id, const std::string& firstPrompt) {
  if (runs.threads().threadInfo(id)) return;
  ThreadOptions options;
  options.id = id;
  options.title = proposedTitle(firstPrompt);
  try {
    runs.threads().createThread(options, {});
  } catch (const StoreError&) {
    if (!runs.threads().threadInfo(id)) throw;  // made meanwhile by another request: fine
  }
}

void installThreadTitleRoutes(httplib::Server& server, ServiceState& state) {
  auto runs = state.runs;
  const size_t maxIdBytes = state.options.maxIdBytes;
  server.Patch(
      "/v1/threads/([^/]+)",
      openAiRoute(state.options.log, [runs, maxIdBytes](const httplib::Request& req,
                                                        httplib::Response& res) {
        const std::string id = req.matches[1];
        json in = parseJson(req.body, {}, false);
        // {"title"}: that title; {"title_from"}: the title proposed from that text (a first
        // prompt), the rule the service's own endpoints use.
        const char* key = in.is_object() && in.contains("title_from") ? "title_from" : "title";
        if (in.is_discarded() || !in.is_object() || !in.contains(key) || !in[key].is_string()) {
          throw OpenAiError(400, "invalid_request_error", "invalid_title",
                            "the body must be {\"title\": string} or {\"title_from\": string}",
                            "title");
        }
        const std::string given = in[key].get<std::string>();
        const std::string title = key == std::string("title") ? given : proposedTitle(given);
        if (id.size() > maxIdBytes || !runs->threads().threadInfo(id) ||
            !runs->threads().setThreadTitle(id, title)) {
          throw OpenAiError(404, "not_found_error", "not_found", "no thread '" + id + "'", "");
        }
        json out = toJson(*runs->threads().threadInfo(id));
        out["object"] = "thread";
        sendJson(res, 200, out);
      }));
}

}  // namespace parley::service
