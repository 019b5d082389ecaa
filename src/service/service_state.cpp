#include "service/service_state.hpp"

#include "parley/conversation_manager.hpp"
#include "parley/stored_thread.hpp"

namespace parley::service {

using json = nlohmann::json;

ThreadInfo ServiceState::mustThread(const std::string& id) const {
  checkId(id, "thread");
  auto info = runs->threads().threadInfo(id);
  if (!info) throw notFound("no thread '" + id + "'");
  return *info;
}

RunInfo ServiceState::mustRun(const std::string& id) const {
  checkId(id, "run");
  auto run = runs->run(id);
  if (!run) throw notFound("no run '" + id + "'");
  return *run;
}

std::string ServiceState::newThreadId(const json& body) const {
  if (!body.contains("id")) return "";
  if (!body["id"].is_string()) throw badRequest("invalid_id", "id must be a string");
  std::string id = body["id"].get<std::string>();
  checkId(id, "thread");
  if (runs->threads().threadInfo(id)) throw conflict("thread_exists", "thread '" + id + "' exists");
  return id;
}

std::optional<RunInfo> ServiceState::unfinishedRun(const std::string& threadId) const {
  for (RunStatus status : {RunStatus::Running, RunStatus::Waiting, RunStatus::Queued}) {
    RunListOptions list;
    list.threadId = threadId;
    list.status = status;
    list.limit = 1;
    auto found = runs->listRuns(list);
    if (!found.empty()) return found.front();
  }
  return std::nullopt;
}

json ServiceState::threadView(const std::string& id) const {
  ConversationManager manager;
  const auto version = loadConversation(runs->threads(), id, manager);
  auto info = runs->threads().threadInfo(id);
  if (!info) throw notFound("no thread '" + id + "'");
  json out = toJson(*info);
  out["object"] = "thread";
  out["version"] = version;
  // A client that reads the thread and then the stream recognises a message it has by its index.
  const auto marks = manager.getMarkMap();
  const auto visible = manager.getMessages();
  json messages = json::array();
  for (size_t i = 0; i < visible.size(); ++i) {
    json m = toJson(visible[i]);
    m["index"] = marks.originalIndices.at(i);
    messages.push_back(std::move(m));
  }
  out["messages"] = std::move(messages);
  out["batch"] = marks.currentBatch;
  out["storage_size"] = manager.storageSize();
  return out;
}

}  // namespace parley::service
