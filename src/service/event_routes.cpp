// /v1/threads/{id}/events: a thread's event log as Server-Sent Events, followed (through the
// shared EventFeeds) or one page for scripts (docs/service.md, "Events").
#include "service/routes.hpp"

namespace parley::service {

namespace {

class EventRoutes {
 public:
  explicit EventRoutes(ServiceState& state) : s_(state) {}

  void events(const httplib::Request& req, httplib::Response& res) {
    const std::string threadId = req.matches[1];
    s_.mustThread(threadId);
    int64_t after = 0;
    const std::string lastId = req.get_header_value("Last-Event-ID");
    const std::string given = !lastId.empty() ? lastId : req.get_param_value("after");
    if (!given.empty()) {
      auto n = parseInt(given);
      if (!n || *n < 0) {
        throw badRequest("invalid_after", "Last-Event-ID and after must be a sequence number");
      }
      after = *n;
    }
    const std::string follow = req.get_param_value("follow");
    if (follow == "false" || follow == "0") {
      onePage(threadId, after, res);
    } else {
      followed(threadId, after, res);
    }
  }

 private:
  // The events there are (one page of the store's maxEventsPerCall), then the end: for scripts
  // and curl. Sent a few at a time as they are read, never built whole.
  void onePage(const std::string& threadId, int64_t after, httplib::Response& res) {
    struct Page {
      int64_t after;
      size_t left;
    };
    auto page = std::make_shared<Page>(Page{after, s_.runs->options().limits.maxEventsPerCall});
    res.set_header("Cache-Control", "no-cache");
    ServiceState& s = s_;
    res.set_chunked_content_provider("text/event-stream", [&s, threadId, page](
                                                              size_t, httplib::DataSink& sink) {
      constexpr size_t kBatch = 8;  // events per write: at most 8 x maxEventBytes held
      std::vector<StoredEvent> events;
      if (page->left > 0) {
        try {
          events = s.runs->readEvents(threadId, page->after, std::min(kBatch, page->left));
        } catch (const std::exception& e) {
          s.log("parley serve: reading events of a thread: " + std::string(e.what()));
          return false;  // the connection ends: the client sees a cut stream
        }
      }
      if (events.empty()) {
        sink.done();
        return true;
      }
      std::string out;
      for (const auto& e : events)
        out += formatSseEvent(e, s.options.maxEventBytes);
      page->after = events.back().seq;
      page->left = events.size() < std::min(kBatch, page->left) ? 0 : page->left - events.size();
      return sink.write(out.data(), out.size());
    });
  }

  void followed(const std::string& threadId, int64_t after, httplib::Response& res) {
    if (s_.feeds->streams() >= s_.options.maxStreams) {
      throw ApiError(503, "server_error", "too_many_streams",
                     "the service serves " + std::to_string(s_.options.maxStreams) +
                         " event streams at most (ServiceOptions::maxStreams); try again later");
    }
    auto feed = s_.feeds->subscribe(threadId, after);
    s_.metrics.streamOpened();
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // nginx: do not buffer the stream
    struct Stream {
      int64_t after;
      bool greeted = false;
    };
    auto stream = std::make_shared<Stream>(Stream{after});
    ServiceState& s = s_;
    res.set_chunked_content_provider(
        "text/event-stream",
        [&s, feed, stream](size_t, httplib::DataSink& sink) {
          if (!stream->greeted) {
            stream->greeted = true;
            // How long EventSource waits before it reconnects (with Last-Event-ID).
            const std::string hello = "retry: 1000\n\n";
            return sink.write(hello.data(), hello.size());
          }
          const auto deadline = std::chrono::steady_clock::now() + s.options.heartbeat;
          auto batch = s.feeds->next(feed, stream->after, deadline);
          if (batch.parked) return true;  // called again when there is news
          if (batch.ended) {
            sink.done();
            return true;
          }
          if (batch.texts.empty()) {
            const std::string beat = ": heartbeat\n\n";
            return sink.write(beat.data(), beat.size());
          }
          std::string out;
          for (const auto& text : batch.texts)
            out += *text;
          stream->after = batch.last;
          s.metrics.eventsSent(batch.texts.size());
          return sink.write(out.data(), out.size());
        },
        [&s, feed](bool) {
          s.feeds->unsubscribe(feed);
          s.metrics.streamClosed();
        });
  }

  ServiceState& s_;
};

}  // namespace

bool isLongLivedRequest(std::string_view method, std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  const std::string_view query =
      target.find('?') == std::string_view::npos ? "" : target.substr(target.find('?'));
  return method == "GET" && path.ends_with("/events") &&
         query.find("follow=false") == std::string_view::npos &&
         query.find("follow=0") == std::string_view::npos;
}

void installEventRoutes(http::Server& server, ServiceState& state) {
  auto routes = std::make_shared<EventRoutes>(state);
  server.Get("/v1/threads/" + kIdSegment + "/events",
             handle(state.options.log, [routes](auto& q, auto& r) { routes->events(q, r); }));
}

}  // namespace parley::service
