// /v1/threads: create, list, read, delete, fork and context operations (docs/service.md).
#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/stored_thread.hpp"
#include "service/routes.hpp"
#include "store/thread_search.hpp"

namespace parley::service {

using json = nlohmann::json;

namespace {

class ThreadRoutes {
 public:
  explicit ThreadRoutes(ServiceState& state) : s_(state) {}

  void create(const httplib::Request& req, httplib::Response& res) {
    json in = jsonBody(req);
    ThreadOptions options;
    options.id = s_.newThreadId(in);
    if (in.contains("title")) {
      if (!in["title"].is_string()) throw badRequest("invalid_title", "title must be a string");
      options.title = in["title"].get<std::string>();
    }
    if (in.contains("metadata")) options.metadata = in["metadata"];
    std::vector<Message> messages;
    if (in.contains("system") && !in["system"].is_null()) {
      if (!in["system"].is_string() || in["system"].get<std::string>().empty()) {
        throw badRequest("invalid_system", "system must be a non-empty string");
      }
      messages.push_back(Message::system(in["system"].get<std::string>()));
    }
    const ThreadInfo info = s_.runs->threads().createThread(options, messages);
    sendJson(res, 201, s_.threadView(info.id));
  }

  void list(const httplib::Request& req, httplib::Response& res) {
    ThreadListOptions list;
    list.limit = 20;
    if (req.has_param("limit")) {
      auto n = parseInt(req.get_param_value("limit"));
      if (!n || *n < 1 || static_cast<size_t>(*n) > s_.options.maxPage) {
        throw badRequest("invalid_limit",
                         "limit must be 1 to " + std::to_string(s_.options.maxPage));
      }
      list.limit = static_cast<size_t>(*n);
    }
    if (req.has_param("offset")) {
      auto n = parseInt(req.get_param_value("offset"));
      if (!n || *n < 0) throw badRequest("invalid_offset", "offset must be a non-negative integer");
      list.offset = static_cast<size_t>(*n);
    }
    // order=newest: the most recently changed first (the chat page); q: threads whose title or
    // id holds this text. Both read by the database (store/thread_search.hpp).
    const std::string order = req.get_param_value("order");
    if (!order.empty() && order != "newest" && order != "oldest") {
      throw badRequest("invalid_order", "order is newest or oldest");
    }
    const std::string query = req.get_param_value("q");
    if (query.size() > detail::kMaxThreadSearchBytes) {
      throw badRequest("invalid_q", "q is longer than " +
                                        std::to_string(detail::kMaxThreadSearchBytes) + " bytes");
    }
    const size_t wanted = list.limit;
    ++list.limit;  // one more says whether there is a next page
    auto threads = order == "newest" || !query.empty()
                       ? detail::searchThreadList(s_.runs->threads(), {list.limit, list.offset,
                                                                       order == "newest", query})
                       : s_.runs->threads().listThreads(list);
    const bool more = threads.size() > wanted;
    if (more) threads.pop_back();
    json data = json::array();
    for (const auto& info : threads) {
      json t = toJson(info);
      t["object"] = "thread";
      data.push_back(std::move(t));
    }
    sendJson(res, 200, {{"object", "list"}, {"data", data}, {"has_more", more}});
  }

  void get(const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    s_.mustThread(id);
    sendJson(res, 200, s_.threadView(id));
  }

  void remove(const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    s_.checkId(id, "thread");
    if (!s_.runs->threads().deleteThread(id)) throw notFound("no thread '" + id + "'");
    sendJson(res, 200, {{"id", id}, {"object", "thread.deleted"}, {"deleted", true}});
  }

  void fork(const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    const ThreadInfo parent = s_.mustThread(id);
    json in = jsonBody(req);
    int64_t position = parent.messageCount;
    if (in.contains("position")) {
      if (!in["position"].is_number_integer()) {
        throw badRequest("invalid_position", "position must be an integer");
      }
      position = in["position"].get<int64_t>();
      if (position < 0 || position > parent.messageCount) {
        throw badRequest("invalid_position", "position must be 0 to " +
                                                 std::to_string(parent.messageCount) +
                                                 " (the thread's stored messages)");
      }
    }
    ThreadOptions options;
    options.id = s_.newThreadId(in);
    options.title = parent.title;
    const ThreadInfo fork = s_.runs->threads().forkThread(id, position, options);
    sendJson(res, 201, s_.threadView(fork.id));
  }

  void operations(const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    s_.mustThread(id);
    json in = jsonBody(req);
    json list = in.contains("operations") ? in["operations"] : json::array({in});
    if (!list.is_array() || list.empty() || list.size() > 100) {
      throw badRequest("invalid_operations", "operations must be an array of 1 to 100 operations");
    }
    if (auto run = s_.unfinishedRun(id)) {
      throw conflict("thread_busy", "thread '" + id + "' has an unfinished run '" + run->id +
                                        "' (" + std::string(toString(run->status)) +
                                        "); operate on it once it finished");
    }
    ConversationManager manager;
    const auto version = loadConversation(s_.runs->threads(), id, manager);
    json results = json::array();
    for (size_t i = 0; i < list.size(); ++i) {
      const json& op = list[i];
      try {
        if (op.is_object() && op.value("operation", "") == "undo") {
          // The chat page's undo: back to the view before the last operation.
          const size_t batch = manager.getMarkMap().currentBatch;
          if (batch == 0) throw ValidationError("operation", "nothing to undo");
          manager.rollbackToBatch(batch - 1);
          results.push_back({{"operation", "undo"}, {"message_count", manager.getMessageCount()}});
          continue;
        }
        const auto result = applyContextOperation(manager, parseContextOperation(op));
        results.push_back({{"operation", result.operation},
                           {"message_count", result.messageCount},
                           {"removed_for_pairing", result.removedForPairing}});
      } catch (const ValidationError& e) {
        throw badRequest("invalid_operation", "operations[" + std::to_string(i) + "]: " + e.what());
      }
    }
    try {
      saveConversation(s_.runs->threads(), id, manager, version);
    } catch (const StoreConflict&) {
      throw conflict("thread_changed", "thread '" + id + "' changed meanwhile; try again");
    }
    json out = s_.threadView(id);
    out["results"] = results;
    sendJson(res, 200, out);
  }

 private:
  ServiceState& s_;
};

}  // namespace

void installThreadRoutes(http::Server& server, ServiceState& state) {
  auto routes = std::make_shared<ThreadRoutes>(state);
  const Logger& log = state.options.log;
  const std::string one = "/v1/threads/" + kIdSegment;
  server.Post("/v1/threads", handle(log, [routes](auto& q, auto& r) { routes->create(q, r); }));
  server.Get("/v1/threads", handle(log, [routes](auto& q, auto& r) { routes->list(q, r); }));
  server.Get(one, handle(log, [routes](auto& q, auto& r) { routes->get(q, r); }));
  server.Delete(one, handle(log, [routes](auto& q, auto& r) { routes->remove(q, r); }));
  server.Post(one + "/fork", handle(log, [routes](auto& q, auto& r) { routes->fork(q, r); }));
  server.Post(one + "/operations",
              handle(log, [routes](auto& q, auto& r) { routes->operations(q, r); }));
}

}  // namespace parley::service
