// A small libcurl client for the service tests: one request and its answer, or an event stream
// read until the test has what it waits for.
#pragma once

#include <curl/curl.h>

#include <strings.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace parley::testing {

struct HttpReply {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

inline size_t collectBody(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

inline size_t collectHeader(char* data, size_t size, size_t n, void* out) {
  std::string line(data, size * n);
  auto colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    for (char& c : name)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' '))
      value.erase(0, 1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n'))
      value.pop_back();
    (*static_cast<std::map<std::string, std::string>*>(out))[name] = value;
  }
  return size * n;
}

// `method url` with `body` (JSON when it is not empty) and extra header lines.
inline HttpReply http(const std::string& method, const std::string& url,
                      const std::string& body = "", const std::vector<std::string>& headers = {},
                      long timeoutMs = 30'000) {
  CURL* curl = curl_easy_init();
  if (!curl) throw std::runtime_error("curl_easy_init failed");
  HttpReply reply;
  curl_slist* list = nullptr;
  for (const auto& h : headers)
    list = curl_slist_append(list, h.c_str());
  // A body, and every POST (the service wants it on state-changing requests), is JSON unless the
  // caller says otherwise.
  const bool typed = std::any_of(headers.begin(), headers.end(), [](const std::string& h) {
    return h.size() >= 13 && strncasecmp(h.c_str(), "Content-Type:", 13) == 0;
  });
  if ((!body.empty() || method == "POST") && !typed) {
    list = curl_slist_append(list, "Content-Type: application/json");
  }
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  if (!body.empty() || method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collectBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, collectHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &reply.headers);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeoutMs);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  CURLcode rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
  curl_slist_free_all(list);
  curl_easy_cleanup(curl);
  if (rc != CURLE_OK) {
    throw std::runtime_error(method + " " + url + ": " + curl_easy_strerror(rc));
  }
  return reply;
}

// One Server-Sent Event as the stream carried it.
struct SseEvent {
  std::string id;
  std::string event;
  std::string data;
};

// Reads the event stream at `url` (with `headers`) and calls `onEvent` for each event; stops
// when it returns false, when the server ends the stream, or after `timeoutMs` (then
// `timedOut`). Comment lines (heartbeats) are counted in `comments`.
struct SseRead {
  long status = 0;
  std::map<std::string, std::string> headers;
  std::vector<SseEvent> events;
  std::string body;  // when the answer was not a stream (an error object)
  int comments = 0;
  bool timedOut = false;
};

inline SseRead readSse(const std::string& url, const std::function<bool(const SseEvent&)>& onEvent,
                       const std::vector<std::string>& headers = {}, long timeoutMs = 30'000) {
  struct State {
    SseRead read;
    std::string buffer;
    SseEvent current;
    const std::function<bool(const SseEvent&)>* onEvent;
    bool stop = false;
  } state;
  state.onEvent = &onEvent;
  auto write = [](char* data, size_t size, size_t n, void* p) -> size_t {
    auto& s = *static_cast<State*>(p);
    s.buffer.append(data, size * n);
    size_t end;
    while ((end = s.buffer.find('\n')) != std::string::npos) {
      std::string line = s.buffer.substr(0, end);
      s.buffer.erase(0, end + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) {
        if (!s.current.data.empty() || !s.current.event.empty() || !s.current.id.empty()) {
          s.read.events.push_back(s.current);
          if (!(*s.onEvent)(s.current)) s.stop = true;
        }
        s.current = {};
        if (s.stop) return 0;
        continue;
      }
      if (line.front() == ':') {
        ++s.read.comments;
        continue;
      }
      auto colon = line.find(':');
      std::string field = line.substr(0, colon);
      std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
      if (!value.empty() && value.front() == ' ') value.erase(0, 1);
      if (field == "id") s.current.id = value;
      if (field == "event") s.current.event = value;
      if (field == "data") s.current.data += (s.current.data.empty() ? "" : "\n") + value;
    }
    s.read.body = s.buffer;
    return size * n;
  };
  CURL* curl = curl_easy_init();
  curl_slist* list = nullptr;
  for (const auto& h : headers)
    list = curl_slist_append(list, h.c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, +write);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &state);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, collectHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &state.read.headers);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeoutMs);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  CURLcode rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &state.read.status);
  curl_slist_free_all(list);
  curl_easy_cleanup(curl);
  state.read.timedOut = rc == CURLE_OPERATION_TIMEDOUT;
  if (rc != CURLE_OK && rc != CURLE_WRITE_ERROR && rc != CURLE_OPERATION_TIMEDOUT) {
    throw std::runtime_error("GET " + url + ": " + curl_easy_strerror(rc));
  }
  return state.read;
}

}  // namespace parley::testing
