// Many event-stream clients on one thread (libcurl's multi interface), for the service's load
// test and benchmark: each connection parses its events and keeps what it received.
#pragma once

#include <curl/curl.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace parley::testing {

class SseSwarm {
 public:
  struct Client {
    std::vector<int64_t> ids;  // the ids received, in order
    std::vector<std::string> types;
    std::string chunks;  // the llm_stream_chunk data lines, concatenated
    std::string buffer;
    std::string id, type, data;
    bool done = false;  // received the `until` event
    CURL* easy = nullptr;
    curl_slist* headers = nullptr;
    SseSwarm* swarm = nullptr;
  };

  // `until`: the event type after which a client has all it wants.
  SseSwarm(std::string until) : until_(std::move(until)), multi_(curl_multi_init()) {
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, 100'000L);
  }
  ~SseSwarm() {
    for (auto& c : clients_) {
      curl_multi_remove_handle(multi_, c->easy);
      curl_easy_cleanup(c->easy);
      curl_slist_free_all(c->headers);
    }
    curl_multi_cleanup(multi_);
  }
  SseSwarm(const SseSwarm&) = delete;
  SseSwarm& operator=(const SseSwarm&) = delete;

  void add(const std::string& url, const std::vector<std::string>& headers = {}) {
    auto c = std::make_unique<Client>();
    c->swarm = this;
    c->easy = curl_easy_init();
    for (const auto& h : headers)
      c->headers = curl_slist_append(c->headers, h.c_str());
    curl_easy_setopt(c->easy, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, &SseSwarm::onData);
    curl_easy_setopt(c->easy, CURLOPT_WRITEDATA, c.get());
    curl_easy_setopt(c->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->easy, CURLOPT_FORBID_REUSE, 1L);
    curl_multi_add_handle(multi_, c->easy);
    clients_.push_back(std::move(c));
  }

  // Drives the transfers until every client is done, `stop()` says so, or `deadline`; returns
  // whether every client is done.
  bool run(std::chrono::steady_clock::time_point deadline, const std::function<bool()>& stop = {}) {
    for (;;) {
      int running = 0;
      curl_multi_perform(multi_, &running);
      int queued = 0;
      while (CURLMsg* msg = curl_multi_info_read(multi_, &queued)) {
        // A transfer ended (the server closed it): its client keeps what it got.
        if (msg->msg == CURLMSG_DONE && msg->data.result != CURLE_OK) {
          lastError_ = curl_easy_strerror(msg->data.result);
        }
      }
      if (doneCount_ == clients_.size()) return true;
      if (stop && stop()) return doneCount_ == clients_.size();
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (running == 0) return doneCount_ == clients_.size();
      curl_multi_poll(multi_, nullptr, 0, 20, nullptr);
    }
  }

  const std::vector<std::unique_ptr<Client>>& clients() const { return clients_; }
  size_t done() const { return doneCount_; }
  // Events received by every client together.
  uint64_t received() const { return received_; }
  // Why the last transfer that failed did; "" if none did.
  const std::string& lastError() const { return lastError_; }

 private:
  static size_t onData(char* data, size_t size, size_t n, void* p) {
    auto& c = *static_cast<Client*>(p);
    c.buffer.append(data, size * n);
    size_t start = 0;
    for (;;) {
      const size_t end = c.buffer.find('\n', start);
      if (end == std::string::npos) break;
      std::string_view line(c.buffer.data() + start, end - start);
      start = end + 1;
      if (line.empty()) {
        if (!c.id.empty()) {
          c.ids.push_back(std::stoll(c.id));
          c.types.push_back(c.type);
          ++c.swarm->received_;
          if (c.type == "llm_stream_chunk") c.chunks += c.data;
          if (c.type == c.swarm->until_ && !c.done) {
            c.done = true;
            ++c.swarm->doneCount_;
          }
        }
        c.id.clear();
        c.type.clear();
        c.data.clear();
      } else if (line.rfind("id: ", 0) == 0) {
        c.id = line.substr(4);
      } else if (line.rfind("event: ", 0) == 0) {
        c.type = line.substr(7);
      } else if (line.rfind("data: ", 0) == 0) {
        c.data = line.substr(6);
      }
    }
    c.buffer.erase(0, start);
    return size * n;
  }

  std::string until_;
  CURLM* multi_;
  std::vector<std::unique_ptr<Client>> clients_;
  size_t doneCount_ = 0;
  uint64_t received_ = 0;
  std::string lastError_;
};

}  // namespace parley::testing
