// The threads of the Agent Protocol / LangGraph API (docs/service.md): parley's threads, their
// metadata, status from their runs, state from their visible messages, history from their
// batches.
#include <algorithm>
#include <charconv>
#include <map>
#include <vector>

#include "parley/errors.hpp"
#include "service/agent_protocol_impl.hpp"
#include "store/thread_metadata.hpp"

namespace parley::service {

using json = nlohmann::json;

void AgentProtocol::Impl::createThread(const httplib::Request& req, httplib::Response& res) {
  const json in = body(req);
  ThreadOptions create;
  if (in.contains("thread_id") && !in["thread_id"].is_null()) {
    if (!in["thread_id"].is_string()) throw apBadRequest("invalid_id", "thread_id is a string");
    create.id = in["thread_id"].get<std::string>();
    checkId(create.id, "thread");
  }
  json metadata = in.value("metadata", json());
  checkMetadata(metadata, "metadata");
  if (metadata.is_object() && metadata.empty()) metadata = nullptr;
  create.metadata = metadata;
  if (in.contains("supersteps") && !in["supersteps"].is_null() &&
      !(in["supersteps"].is_array() && in["supersteps"].empty())) {
    throw apBadRequest("unsupported",
                       "supersteps: a parley thread has no graph to replay; submit runs instead");
  }
  if (in.contains("ttl") && !in["ttl"].is_null()) {
    throw apBadRequest("unsupported", "ttl: parley keeps a thread until it is deleted");
  }
  const std::string ifExists = optionalString(in, "if_exists", "raise");
  if (ifExists != "raise" && ifExists != "do_nothing") {
    throw apBadRequest("invalid_if_exists", "if_exists is raise or do_nothing");
  }
  if (!create.id.empty()) {
    if (auto existing = runs.threads().threadInfo(create.id)) {
      if (ifExists == "do_nothing") {
        sendApJson(res, 200, threadJson(*existing));
        return;
      }
      throw apConflict("thread_exists", "thread '" + create.id + "' exists");
    }
  }
  const ThreadInfo info = runs.threads().createThread(create);
  sendApJson(res, 200, threadJson(info));
}

void AgentProtocol::Impl::getThread(const httplib::Request& req, httplib::Response& res) {
  sendApJson(res, 200, threadJson(mustThread(req.matches[1])));
}

void AgentProtocol::Impl::patchThread(const httplib::Request& req, httplib::Response& res) {
  const ThreadInfo info = mustThread(req.matches[1]);
  const json in = body(req);
  if (in.contains("ttl") && !in["ttl"].is_null()) {
    throw apBadRequest("unsupported", "ttl: parley keeps a thread until it is deleted");
  }
  const json patch = in.value("metadata", json());
  checkMetadata(patch, "metadata");
  if (patch.is_object() && !patch.empty()) {
    // Merged into the thread's metadata, key by key (LangGraph's PATCH), capped as a whole.
    json merged = info.metadata.is_object() ? info.metadata : json::object();
    for (const auto& [key, value] : patch.items())
      merged[key] = value;
    checkMetadata(merged, "the thread's metadata after the patch");
    if (!detail::setThreadMetadata(runs.threads(), info.id, merged)) {
      throw apNotFound("no thread '" + info.id + "'");
    }
  }
  sendApJson(res, 200, threadJson(mustThread(info.id)));
}

void AgentProtocol::Impl::deleteThread(const httplib::Request& req, httplib::Response& res) {
  const ThreadInfo info = mustThread(req.matches[1]);
  if (!runs.threads().deleteThread(info.id)) throw apNotFound("no thread '" + info.id + "'");
  res.status = 204;
}

void AgentProtocol::Impl::copyThread(const httplib::Request& req, httplib::Response& res) {
  const ThreadInfo info = mustThread(req.matches[1]);
  ThreadOptions copy;
  copy.title = info.title;
  copy.metadata = info.metadata;
  // A fork of the whole thread: it shares the stored messages, and the state with them.
  const ThreadInfo made = runs.threads().forkThread(info.id, info.messageCount, copy);
  sendApJson(res, 200, threadJson(made));
}

void AgentProtocol::Impl::searchThreads(const httplib::Request& req, httplib::Response& res,
                                        bool count) {
  const json in = body(req);
  const size_t limit = count ? 0 : pageLimit(in.value("limit", json()), 10);
  const size_t offset = count ? 0 : pageOffset(in.value("offset", json()));
  const json metadata = in.value("metadata", json());
  checkMetadata(metadata, "metadata");
  if (in.contains("values") && !in["values"].is_null() &&
      !(in["values"].is_object() && in["values"].empty())) {
    throw apBadRequest("unsupported", "values: threads are searched by metadata, status and id");
  }
  std::string status;
  if (in.contains("status") && !in["status"].is_null()) {
    if (!in["status"].is_string()) throw apBadRequest("invalid_status", "status is a string");
    status = in["status"].get<std::string>();
    if (status != "idle" && status != "busy" && status != "interrupted" && status != "error") {
      throw apBadRequest("invalid_status", "status is idle, busy, interrupted or error");
    }
  }
  std::vector<std::string> ids;
  if (in.contains("ids") && !in["ids"].is_null()) {
    if (!in["ids"].is_array() || in["ids"].size() > options.maxPage) {
      throw apBadRequest("invalid_ids",
                         "ids is a list of at most " + std::to_string(options.maxPage) + " ids");
    }
    for (const auto& value : in["ids"]) {
      if (!value.is_string()) throw apBadRequest("invalid_ids", "ids are strings");
      ids.push_back(value.get<std::string>());
    }
  }
  const std::string sortBy = optionalString(in, "sort_by", "created_at");
  if (sortBy != "created_at" && sortBy != "updated_at" && sortBy != "thread_id") {
    throw apBadRequest("invalid_sort_by", "sort_by is created_at, updated_at or thread_id");
  }
  const std::string order = optionalString(in, "sort_order", "desc");
  if (order != "asc" && order != "desc") throw apBadRequest("invalid_sort_order", "asc or desc");

  // The threads, at most kMaxSearchScan of them read (the store lists oldest first).
  ThreadListOptions list;
  list.limit = kMaxSearchScan;
  std::vector<ThreadInfo> found;
  if (!ids.empty()) {
    for (const auto& id : ids) {
      checkId(id, "thread");
      if (auto info = runs.threads().threadInfo(id)) found.push_back(*info);
    }
  } else {
    found = runs.threads().listThreads(list);
  }
  std::erase_if(found, [&](const ThreadInfo& t) { return !metadataMatches(t.metadata, metadata); });
  if (!status.empty()) {
    // "error" is never a parley thread's state: a failed run leaves the thread as it was.
    std::erase_if(found, [&](const ThreadInfo& t) { return threadStatus(t.id).status != status; });
  }
  if (count) {
    sendApJson(res, 200, found.size());
    return;
  }
  std::stable_sort(found.begin(), found.end(), [&](const ThreadInfo& a, const ThreadInfo& b) {
    const bool less = sortBy == "thread_id"    ? a.id < b.id
                      : sortBy == "updated_at" ? a.updatedAt < b.updatedAt
                                               : a.createdAt < b.createdAt;
    const bool greater = sortBy == "thread_id"    ? b.id < a.id
                         : sortBy == "updated_at" ? b.updatedAt < a.updatedAt
                                                  : b.createdAt < a.createdAt;
    return order == "asc" ? less : greater;
  });
  json out = json::array();
  for (size_t i = offset; i < found.size() && out.size() < limit; ++i)
    out.push_back(threadJson(found[i]));
  sendApJson(res, 200, out);
}

namespace {

using Position = std::pair<size_t, size_t>;  // a state: (batch, the stored messages it covers)

// A thread's states, newest first (docs/service.md): the current batch's after each of its
// visible messages, from the latest down to the state before its first, then each earlier
// batch's view as it was when the next batch began. A state's parent is the one after it, so
// that a client (useStream) finds the state before each message: where a reply is regenerated
// or a message edited from.
class ThreadStates {
 public:
  using View = AgentProtocol::Impl::View;

  ThreadStates(const AgentProtocol::Impl& ap, const std::string& threadId)
      : ap_(ap), thread_(threadId), now_(ap.view(threadId)) {
    current_.emplace_back(now_.batch, now_.storageSize);
    for (auto it = now_.messages.rbegin(); it != now_.messages.rend(); ++it)
      current_.emplace_back(now_.batch, static_cast<size_t>(it->first));
  }

  // The i-th state (0: the latest); nullopt past the first.
  std::optional<Position> at(size_t i) {
    if (i < current_.size()) return current_[i];
    const size_t back = i - current_.size() + 1;  // batches before the current one
    if (back > now_.batch) return std::nullopt;
    return earlier(now_.batch - back).first;
  }

  View view(size_t i) {
    if (i >= current_.size()) return earlier(now_.batch - (i - current_.size() + 1)).second;
    View out = now_;
    out.storageSize = current_[i].second;
    std::erase_if(out.messages,
                  [&](const auto& m) { return static_cast<size_t>(m.first) >= out.storageSize; });
    return out;
  }

  // Where `p` is in the list; nullopt for a state it does not name.
  std::optional<size_t> find(Position p) {
    if (p.first == now_.batch) {
      for (size_t i = 0; i < current_.size(); ++i)
        if (current_[i] == p) return i;
      return std::nullopt;
    }
    if (p.first > now_.batch) return std::nullopt;
    const size_t i = current_.size() + (now_.batch - 1 - p.first);
    if (at(i) != p) return std::nullopt;
    return i;
  }

 private:
  // An earlier batch's state and view, as it was when the next began: its checkpoint names the
  // messages it holds, so that it reads the same later.
  const std::pair<Position, View>& earlier(size_t batch) {
    auto it = earlier_.find(batch);
    if (it != earlier_.end()) return it->second;
    View at = ap_.view(thread_, std::make_pair(batch, now_.storageSize));
    at.storageSize = at.messages.empty() ? 0 : static_cast<size_t>(at.messages.rbegin()->first) + 1;
    const Position p{batch, at.storageSize};
    return earlier_.emplace(batch, std::make_pair(p, std::move(at))).first->second;
  }

  const AgentProtocol::Impl& ap_;
  std::string thread_;
  View now_;
  std::vector<Position> current_;
  std::map<size_t, std::pair<Position, View>> earlier_;
};

}  // namespace

void AgentProtocol::Impl::threadState(const httplib::Request& req, httplib::Response& res,
                                      const std::string& checkpointId) {
  const ThreadInfo info = mustThread(req.matches[1]);
  ThreadStates states(*this, info.id);
  if (checkpointId.empty()) {
    sendApJson(res, 200, stateJson(info, states.view(0), true, states.at(1)));
    return;
  }
  auto at = parseCheckpoint(checkpointId);
  if (!at) {
    throw apBadRequest("invalid_checkpoint",
                       "a checkpoint id of parley is b<batch>-n<messages>, as states give it");
  }
  // A state the history lists has its parent there; any other is read as asked, parentless.
  if (auto i = states.find(*at)) {
    sendApJson(res, 200, stateJson(info, states.view(*i), false, states.at(*i + 1)));
    return;
  }
  sendApJson(res, 200, stateJson(info, view(info.id, at), false, std::nullopt));
}

void AgentProtocol::Impl::threadHistory(const httplib::Request& req, httplib::Response& res) {
  const ThreadInfo info = mustThread(req.matches[1]);
  json in = req.method == "POST" ? body(req) : json::object();
  if (req.method == "GET" && req.has_param("limit")) {
    int64_t n = 0;
    const std::string text = req.get_param_value("limit");
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || end != text.data() + text.size()) {
      throw apBadRequest("invalid_limit", "limit is a number");
    }
    in["limit"] = n;
  }
  const size_t limit = std::min(pageLimit(in.value("limit", json()), 10), kMaxHistory);
  const json metadata = in.value("metadata", json());
  checkMetadata(metadata, "metadata");
  ThreadStates states(*this, info.id);
  size_t from = 0;
  auto before = in.value("before", json());
  if (before.is_object() && before.contains("checkpoint_id") &&
      before["checkpoint_id"].is_string()) {
    auto at = parseCheckpoint(before["checkpoint_id"].get<std::string>());
    if (!at) throw apBadRequest("invalid_checkpoint", "before names no checkpoint of parley");
    auto i = states.find(*at);
    if (!i) throw apNotFound("before: no state " + before["checkpoint_id"].get<std::string>());
    from = *i + 1;
  }
  json out = json::array();
  // A page reads at most kMaxHistory states, whichever the metadata filter keeps, and ends
  // early once its states hold kMaxHistoryMessages messages (a long thread's states each hold
  // it all): the client goes on with `before`.
  size_t messages = 0;
  for (size_t i = from; out.size() < limit && i < from + kMaxHistory; ++i) {
    const auto at = states.at(i);
    if (!at) break;
    View state = states.view(i);
    if (!out.empty() && messages + state.messages.size() > kMaxHistoryMessages) break;
    json made = stateJson(info, state, i == 0, states.at(i + 1));
    if (!metadataMatches(made["metadata"], metadata)) continue;
    messages += state.messages.size();
    out.push_back(std::move(made));
  }
  sendApJson(res, 200, out);
}

}  // namespace parley::service
