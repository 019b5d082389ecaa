// The A2A 1.0 routes of `parley serve` (docs/a2a.md): the Agent Card at
// /.well-known/agent-card.json, the JSON-RPC binding at POST /a2a/jsonrpc and the HTTP+JSON
// binding under /a2a/rest. Both bindings call the same operations, over the durable runs: a task
// is a run, its stream the run's events encoded by A2aTaskEncoder (a2a_mapping.hpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "service/a2a_mapping.hpp"
#include "service/routes.hpp"
#include "store/item_store.hpp"
#include "store/sql_store.hpp"

namespace parley::service {

using json = nlohmann::json;

namespace {

// How a stream's frames are wrapped: JSON-RPC responses carrying the request's id, or the
// StreamResponse alone (HTTP+JSON).
struct A2aFraming {
  bool jsonRpc = false;
  json id;
};

// Push notification configs per task (A2aLimits has the other caps).
constexpr size_t kA2aMaxPushConfigsPerTask = 10;
constexpr size_t kA2aMaxPushTokenBytes = 1'024;
constexpr size_t kA2aMaxPushCredentialsBytes = 4'096;
constexpr size_t kA2aMaxWatchedTasks = 10'000;
const char* const kA2aPushNamespace = "a2a-push";
// A task's push cursor ({"posted": the state last notified, "owner": the process delivering,
// "until": its claim's end, ms since the epoch}), one item per task with configs, shared by every
// process of the database: the process holding it delivers; a claim not renewed (its process
// died) is taken over by another.
const char* const kA2aPushCursorNamespace = "a2a-push-cursor";
constexpr int64_t kA2aPushLeaseMs = 5'000;
constexpr auto kA2aPushPoll = std::chrono::milliseconds(250);
constexpr auto kA2aPushIdlePoll = std::chrono::milliseconds(1'000);  // no task has configs

int64_t a2aEpochMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The watcher's state, shared with the webhook sender's threads, which tell it when the posts
// of a round have ended (they may do so after the routes are gone).
struct A2aPushWatch {
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  bool woken = false;
  // Task id -> the state being notified and its posts not ended yet.
  std::map<std::string, std::pair<std::string, size_t>> rounds;

  void postEnded(const std::string& taskId) {
    std::lock_guard lock(mutex);
    auto round = rounds.find(taskId);
    if (round != rounds.end() && round->second.second > 0 && --round->second.second == 0) {
      woken = true;
      wake.notify_all();
    }
  }
};

class A2aRoutes {
 public:
  explicit A2aRoutes(ServiceState& state) : state_(state) {}
  ~A2aRoutes() {
    {
      std::lock_guard lock(push_->mutex);
      push_->stopping = true;
    }
    push_->wake.notify_all();
    if (watcher_.joinable()) watcher_.join();
  }

  static void install(const std::shared_ptr<A2aRoutes>& self, http::Server& server);

 private:
  RunStore& runs() { return *state_.runs; }

  json card(const httplib::Request& req, bool extended) const {
    std::string host = req.get_header_value("Host");
    if (host.empty()) host = state_.options.host;
    json out = a2aAgentCard(
        {"http://" + host, state_.options.models, !state_.options.authTokens.empty(), extended},
        limits_);
    // Signed per request: the card names the Host it was reached by.
    if (state_.options.a2aCardSigner) out = state_.options.a2aCardSigner->sign(std::move(out));
    return out;
  }

  RunInfo mustTask(const std::string& id) {
    if (id.empty() || id.size() > limits_.maxTaskIdBytes) throw a2aTaskNotFound(id.substr(0, 128));
    auto run = runs().run(id);
    if (!run) throw a2aTaskNotFound(id);
    return *run;
  }

  static std::optional<size_t> historyLength(const json& params, const A2aLimits& limits) {
    if (!params.contains("historyLength") || params["historyLength"].is_null()) return std::nullopt;
    const json& n = params["historyLength"];
    if (!n.is_number_integer() || n.get<int64_t>() < 0 ||
        n.get<int64_t>() > static_cast<int64_t>(limits.maxHistoryLength)) {
      throw a2aInvalidParams("historyLength: 0 to " + std::to_string(limits.maxHistoryLength));
    }
    return n.get<size_t>();
  }

  // The encoder of a run, fed the run's events up to `upTo` (all: -1); its answer is the run's
  // text so far.
  A2aTaskEncoder replay(const RunInfo& run, int64_t upTo = -1) {
    A2aTaskEncoder encoder(run);
    const size_t page = runs().options().limits.maxEventsPerCall;
    for (int64_t after = 0;;) {
      const auto events = runs().readEvents(run.threadId, after, page);
      for (const auto& e : events) {
        if (upTo >= 0 && e.seq > upTo) return encoder;
        encoder.feed(e);
      }
      if (events.size() < page) break;
      after = events.back().seq;
    }
    return encoder;
  }

  json task(const RunInfo& run, std::optional<size_t> history = std::nullopt,
            bool artifacts = true) {
    return a2aTask(run, replay(run).answer(), history, artifacts);
  }

  int64_t lastSeq(const std::string& threadId) {
    return runs().lastEventSeqs(std::span<const std::string>(&threadId, 1)).front().value_or(0);
  }

  // A message: a new task on its context (a thread, made when new), or the answer to the task it
  // names when that task waits. `after` is the thread's last event before it.
  RunInfo send(const json& params, int64_t& after);
  // Until the run has finished or waits for an answer, or `deadline`.
  RunInfo await(RunInfo run, std::chrono::steady_clock::time_point deadline);

  json sendMessage(const json& params) {
    int64_t after = 0;
    RunInfo run = send(params, after);
    const json config = params.value("configuration", json::object());
    const bool immediate = config.is_object() && config.value("returnImmediately", false);
    if (!immediate) {
      run =
          await(std::move(run), std::chrono::steady_clock::now() + state_.options.openAiRunTimeout);
    }
    return {
        {"task", task(run, historyLength(config.is_object() ? config : json::object(), limits_))}};
  }

  json getTask(const json& params) {
    return task(mustTask(params.value("id", "")), historyLength(params, limits_));
  }

  json listTasks(const json& params);

  json cancelTask(const json& params) {
    RunInfo run = mustTask(params.value("id", ""));
    if (a2aTerminal(run.status)) throw a2aTaskNotCancelable(run.id, a2aTaskState(run.status));
    runs().cancel(run.id);
    // A running run stops at its worker's next heartbeat: wait for it, briefly.
    run = await(mustTask(run.id), std::chrono::steady_clock::now() + std::chrono::seconds(10));
    return task(run);
  }

  detail::ItemStore& items() {
    std::call_once(itemsOnce_,
                   [this] { items_ = std::make_unique<detail::ItemStore>(runs().threads()); });
    return *items_;
  }
  static std::vector<std::string> pushNamespace(const std::string& taskId) {
    return {kA2aPushNamespace, taskId};
  }
  std::vector<json> pushConfigs(const std::string& taskId) {
    std::vector<json> out;
    for (const auto& item : items().search(pushNamespace(taskId), json::object(),
                                           kA2aMaxPushConfigsPerTask + 1, 0, false))
      out.push_back(item.value);
    return out;
  }
  json pushCreate(const json& params);
  json pushGet(const std::string& taskId, const std::string& id) {
    mustTask(taskId);
    auto item = items().get(pushNamespace(taskId), id, false);
    if (!item) {
      // The specification has no error of its own for a missing config: TaskNotFound's code.
      throw A2aError(
          -32001, 404, "NOT_FOUND", "TASK_NOT_FOUND",
          "task '" + taskId + "' has no push notification config '" + id.substr(0, 128) + "'");
    }
    return item->value;
  }
  json pushList(const std::string& taskId) {
    mustTask(taskId);
    return {{"configs", pushConfigs(taskId)}, {"nextPageToken", ""}};
  }
  json pushDelete(const std::string& taskId, const std::string& id) {
    pushGet(taskId, id);
    items().remove(pushNamespace(taskId), id);
    return json::object();
  }
  // Posts the task's status to its configs whenever it changes, until it has finished: one
  // watcher thread per process, each delivering for the tasks whose cursor it holds
  // (docs/a2a.md, "Push notifications").
  void watch();
  void watchLoop();
  bool deliverPushes();
  void deliverPush(const detail::StoredItem& item, int64_t now);
  void notify(const RunInfo& run);

  // Streams the run's events after `after` as StreamResponses, the task first.
  void stream(httplib::Response& res, const RunInfo& run, int64_t after, A2aFraming framing);

  void sendStreaming(const json& params, httplib::Response& res, A2aFraming framing) {
    int64_t after = 0;
    RunInfo run = send(params, after);
    stream(res, run, after, std::move(framing));
  }

  void subscribe(const std::string& id, const httplib::Request& req, httplib::Response& res,
                 A2aFraming framing) {
    const RunInfo run = mustTask(id);
    if (a2aTerminal(run.status)) {
      throw a2aUnsupported("task '" + run.id + "' is " + a2aTaskState(run.status) +
                           ": a finished task has no stream; GetTask reads it");
    }
    int64_t after = lastSeq(run.threadId);
    if (const std::string last = req.get_header_value("Last-Event-ID"); !last.empty()) {
      const auto seq = parseInt(last);
      if (!seq || *seq < 0) throw a2aInvalidParams("Last-Event-ID: not an event id we sent");
      after = std::min(after, *seq);
    }
    stream(res, run, after, std::move(framing));
  }

  void jsonRpc(const httplib::Request& req, httplib::Response& res);
  void rest(const httplib::Request& req, httplib::Response& res,
            const std::function<void()>& handler);

  ServiceState& state_;
  A2aLimits limits_;
  std::once_flag itemsOnce_;
  std::unique_ptr<detail::ItemStore> items_;
  std::shared_ptr<A2aPushWatch> push_ = std::make_shared<A2aPushWatch>();
  const std::string processId_ = detail::generateId("a2a-");  // its claims on push cursors
  std::atomic<size_t> cursorsSeen_{0};                        // by the last round
  std::once_flag watchOnce_;
  std::thread watcher_;
};

json A2aRoutes::pushCreate(const json& params) {
  const std::string taskId = params.value("taskId", "");
  const RunInfo run = mustTask(taskId);
  if (a2aTerminal(run.status)) {
    throw a2aUnsupported("task '" + taskId + "' is " + a2aTaskState(run.status) +
                         ": it has nothing more to notify");
  }
  auto text = [&](const char* name, size_t cap) {
    const auto it = params.find(name);
    if (it == params.end() || it->is_null()) return std::string();
    if (!it->is_string() || it->get<std::string>().size() > cap) {
      throw a2aInvalidParams(std::string(name) + ": a string of at most " + std::to_string(cap) +
                             " bytes");
    }
    return it->get<std::string>();
  };
  const std::string url = text("url", 2'048);
  if (url.empty()) throw a2aInvalidParams("url: required");
  try {
    state_.webhooks->checkUrl(url);
  } catch (const ValidationError& e) {
    throw a2aInvalidParams(std::string("url: ") + e.what());
  }
  std::string id = text("id", limits_.maxTaskIdBytes);
  if (id.empty()) id = detail::generateId("pn-");
  if (id.find('.') != std::string::npos) throw a2aInvalidParams("id: no '.'");
  json config = {{"id", id}, {"taskId", taskId}, {"url", url}};
  if (const std::string token = text("token", kA2aMaxPushTokenBytes); !token.empty())
    config["token"] = token;
  if (const auto auth = params.find("authentication"); auth != params.end() && !auth->is_null()) {
    if (!auth->is_object() || !(*auth).contains("scheme") || !(*auth)["scheme"].is_string() ||
        (*auth)["scheme"].get<std::string>().empty() ||
        (*auth)["scheme"].get<std::string>().size() > 64) {
      throw a2aInvalidParams("authentication.scheme: a string of 1 to 64 bytes");
    }
    const std::string credentials = auth->value("credentials", "");
    if (credentials.size() > kA2aMaxPushCredentialsBytes) {
      throw a2aInvalidParams("authentication.credentials: over " +
                             std::to_string(kA2aMaxPushCredentialsBytes) + " bytes");
    }
    config["authentication"] = {{"scheme", (*auth)["scheme"]}, {"credentials", credentials}};
  }
  const auto existing = pushConfigs(taskId);
  const bool replaces = std::any_of(existing.begin(), existing.end(),
                                    [&](const json& c) { return c.value("id", "") == id; });
  if (!replaces && existing.size() >= kA2aMaxPushConfigsPerTask) {
    throw a2aInvalidParams("task '" + taskId + "' has " +
                           std::to_string(kA2aMaxPushConfigsPerTask) +
                           " push notification configs, the most it may have");
  }
  if (cursorsSeen_ >= kA2aMaxWatchedTasks) {
    throw a2aInternal("the service watches " + std::to_string(kA2aMaxWatchedTasks) +
                      " tasks for push notifications at most; try again later");
  }
  items().put(pushNamespace(taskId), id, config, std::nullopt);
  // The task's cursor, unless it has one: the next round of any process delivers.
  items().replaceIf({kA2aPushCursorNamespace}, taskId, nullptr,
                    {{"posted", ""}, {"owner", ""}, {"until", 0}});
  watch();
  return config;
}

void A2aRoutes::watch() {
  std::call_once(watchOnce_, [this] { watcher_ = std::thread([this] { watchLoop(); }); });
  std::lock_guard lock(push_->mutex);
  push_->woken = true;
  push_->wake.notify_all();
}

void A2aRoutes::watchLoop() {
  std::unique_lock lock(push_->mutex);
  while (!push_->stopping) {
    lock.unlock();
    bool busy = false;
    try {
      busy = deliverPushes();
    } catch (const ValidationError&) {
      return;  // a store without the item table (not parley's SQL engine): nothing to deliver
    } catch (const std::exception& e) {
      state_.log("parley serve: A2A push notifications: " + std::string(e.what()));
    }
    lock.lock();
    // A poll, as the tasks may be worked, and their configs made, by other processes.
    push_->wake.wait_for(lock, busy ? kA2aPushPoll : kA2aPushIdlePoll,
                         [this] { return push_->stopping || push_->woken; });
    push_->woken = false;
  }
}

// One round over every task with configs; true if there was any.
bool A2aRoutes::deliverPushes() {
  const auto cursors =
      items().search({kA2aPushCursorNamespace}, json::object(), kA2aMaxWatchedTasks, 0, false);
  cursorsSeen_ = cursors.size();
  const int64_t now = a2aEpochMs();
  for (const auto& item : cursors) {
    {
      std::lock_guard lock(push_->mutex);
      if (push_->stopping) break;
    }
    try {
      deliverPush(item, now);
    } catch (const std::exception& e) {
      state_.log("parley serve: A2A push notifications of task " + item.key + ": " + e.what());
    }
  }
  return !cursors.empty();
}

void A2aRoutes::deliverPush(const detail::StoredItem& item, int64_t now) {
  const std::vector<std::string> ns{kA2aPushCursorNamespace};
  json cursor = item.value;
  const bool mine = cursor.value("owner", "") == processId_;
  const int64_t until = cursor.value("until", int64_t{0});
  if (!mine && until > now) return;  // another process delivers; its claim is alive
  // Claimed, or renewed once half gone (a claim is a write: not one per poll).
  if (!mine || until - now < kA2aPushLeaseMs / 2) {
    json claimed = cursor;
    claimed["owner"] = processId_;
    claimed["until"] = now + kA2aPushLeaseMs;
    if (!items().replaceIf(ns, item.key, cursor, claimed)) return;  // another process was first
    cursor = std::move(claimed);
  }
  if (!mine) {  // a claim taken over: what an earlier holder had under way is not ours
    std::lock_guard lock(push_->mutex);
    push_->rounds.erase(item.key);
  }
  // The posts of a round under way; once they have ended, the cursor moves on to its state.
  std::optional<std::string> ended;
  {
    std::lock_guard lock(push_->mutex);
    auto round = push_->rounds.find(item.key);
    if (round != push_->rounds.end()) {
      if (round->second.second > 0) return;
      ended = round->second.first;
      push_->rounds.erase(round);
    }
  }
  if (ended) {
    json posted = cursor;
    posted["posted"] = *ended;
    if (!items().replaceIf(ns, item.key, cursor, posted)) return;
    cursor = std::move(posted);
  }
  const auto run = runs().run(item.key);
  if (!run) {
    items().remove(ns, item.key);  // the task is gone
    return;
  }
  const std::string state = a2aTaskState(run->status);
  if (state == cursor.value("posted", "")) {
    if (a2aTerminal(run->status)) items().remove(ns, item.key);  // all said
    return;
  }
  notify(*run);
}

void A2aRoutes::notify(const RunInfo& run) {
  std::vector<json> configs;
  try {
    configs = pushConfigs(run.id);
  } catch (const std::exception& e) {
    state_.log("parley serve: A2A push notifications: " + std::string(e.what()));
    return;
  }
  json status = a2aTaskStatus(run);
  const json body = {
      {"statusUpdate", {{"taskId", run.id}, {"contextId", run.threadId}, {"status", status}}}};
  const std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
  {
    std::lock_guard lock(push_->mutex);
    push_->rounds[run.id] = {a2aTaskState(run.status), configs.size()};
    if (configs.empty()) push_->woken = true;  // nothing to post: the cursor moves on at once
  }
  for (const auto& config : configs) {
    WebhookDelivery delivery;
    delivery.url = config.value("url", "");
    delivery.event = "a2a.task." + status.value("state", std::string());
    delivery.body = text;
    if (config.contains("token"))
      delivery.headers.emplace_back("X-A2A-Notification-Token", config["token"].get<std::string>());
    if (config.contains("authentication")) {
      const json& auth = config["authentication"];
      delivery.headers.emplace_back("Authorization",
                                    auth.value("scheme", "") + " " + auth.value("credentials", ""));
    }
    delivery.done = [push = push_, id = run.id](bool) { push->postEnded(id); };
    // Refused or dropped at once: no post to wait for (given up on, as a failed post is).
    if (!state_.webhooks->send(std::move(delivery))) push_->postEnded(run.id);
  }
}

RunInfo A2aRoutes::send(const json& params, int64_t& after) {
  if (!params.is_object()) throw a2aInvalidParams("params: an object");
  if (const auto it = params.find("metadata"); it != params.end() && !it->is_null()) {
    if (!it->is_object()) throw a2aInvalidParams("metadata: an object");
    if (it->dump(-1, ' ', false, json::error_handler_t::replace).size() >
        limits_.maxMetadataBytes) {
      throw a2aInvalidParams("metadata: over " + std::to_string(limits_.maxMetadataBytes) +
                             " bytes (A2aLimits::maxMetadataBytes)");
    }
  }
  // A push notification config given with the message is the new (or answered) task's.
  json push;
  if (const auto it = params.find("configuration"); it != params.end() && it->is_object()) {
    if (it->contains("taskPushNotificationConfig") &&
        !(*it)["taskPushNotificationConfig"].is_null()) {
      push = (*it)["taskPushNotificationConfig"];
      if (!push.is_object()) throw a2aInvalidParams("taskPushNotificationConfig: an object");
      try {
        state_.webhooks->checkUrl(push.value("url", ""));
      } catch (const ValidationError& e) {
        throw a2aInvalidParams(std::string("taskPushNotificationConfig.url: ") + e.what());
      }
    }
  }
  auto withPush = [&](RunInfo run) {
    if (push.is_object()) {
      push["taskId"] = run.id;
      pushCreate(push);
    }
    return run;
  };
  const auto found = params.find("message");
  if (found == params.end()) throw a2aInvalidParams("message: required");
  const json& message = *found;
  if (!message.is_object()) throw a2aInvalidParams("message: an object");
  auto idOf = [&](const char* name) {
    const auto it = message.find(name);
    if (it == message.end() || it->is_null()) return std::string();
    if (!it->is_string() || it->get<std::string>().size() > limits_.maxTaskIdBytes) {
      throw a2aInvalidParams(std::string("message.") + name + ": a string of at most " +
                             std::to_string(limits_.maxTaskIdBytes) + " bytes");
    }
    return it->get<std::string>();
  };
  const std::string messageId = idOf("messageId");
  if (messageId.empty()) throw a2aInvalidParams("message.messageId: required");
  const std::string taskId = idOf("taskId");
  const std::string contextId = idOf("contextId");
  if (!taskId.empty()) {
    RunInfo run = mustTask(taskId);
    if (!contextId.empty() && contextId != run.threadId) {
      throw a2aInvalidParams("message.contextId: task '" + taskId + "' belongs to context '" +
                             run.threadId + "'");
    }
    if (run.status != RunStatus::Waiting || !run.response.is_null()) {
      throw a2aUnsupported(
          "task '" + taskId + "' is " + a2aTaskState(run.status) +
          ": only a task in TASK_STATE_INPUT_REQUIRED takes a message; send a new message with "
          "contextId '" +
          run.threadId + "' (and no taskId) to go on with the conversation");
    }
    const json answer = a2aAnswer(message, limits_);
    after = lastSeq(run.threadId);
    return withPush(runs().respond(run.id, answer));
  }
  Message input = a2aUserMessage(message, limits_);
  std::string threadId = contextId;
  if (threadId.empty()) {
    threadId = detail::generateId("ctx-");
  } else {
    try {
      state_.checkId(threadId, "contextId");
    } catch (const ApiError& e) {
      throw a2aInvalidParams(std::string("message.contextId: ") + e.what());
    }
  }
  SubmitOptions submit;
  submit.stream = true;
  submit.metadata = {{"a2a", {{"messageId", messageId}}}};
  if (const json meta = params.value("metadata", json::object());
      meta.is_object() && meta.contains("skill")) {
    if (!meta["skill"].is_string()) throw a2aInvalidParams("metadata.skill: a string");
    const std::string skill = meta["skill"];
    const auto& models = state_.options.models;
    if (!models.empty() && std::find(models.begin(), models.end(), skill) == models.end()) {
      throw a2aInvalidParams("metadata.skill: '" + skill.substr(0, 64) +
                             "' is not a skill of this agent (its card lists them)");
    }
    if (skill != "default") submit.profile = skill;
  }
  after = runs().threads().threadInfo(threadId) ? lastSeq(threadId) : 0;
  try {
    return withPush(runs().submit(threadId, std::span<const Message>(&input, 1), submit));
  } catch (const ValidationError& e) {
    throw a2aInvalidParams(e.what());
  }
}

RunInfo A2aRoutes::await(RunInfo run, std::chrono::steady_clock::time_point deadline) {
  auto done = [](const RunInfo& r) {
    return isFinished(r.status) || (r.status == RunStatus::Waiting && r.response.is_null());
  };
  if (done(run)) return run;
  if (state_.feeds->streams() >= state_.options.maxStreams) {
    throw a2aInternal("the service follows " + std::to_string(state_.options.maxStreams) +
                      " runs and streams at most (ServiceOptions::maxStreams); try again later");
  }
  int64_t after = lastSeq(run.threadId);
  auto feed = state_.feeds->subscribe(run.threadId, after);
  struct Leave {
    EventFeeds* feeds;
    EventFeeds::Subscription feed;
    ~Leave() { feeds->unsubscribe(feed); }
  } leave{state_.feeds.get(), feed};
  for (;;) {
    run = mustTask(run.id);
    if (done(run) || std::chrono::steady_clock::now() >= deadline) return run;
    auto batch = state_.feeds->next(
        feed, after,
        std::min(deadline, std::chrono::steady_clock::now() + state_.options.heartbeat));
    if (batch.ended) return mustTask(run.id);
    after = batch.last;
  }
}

json A2aRoutes::listTasks(const json& params) {
  RunListOptions list;
  const std::string contextId = params.value("contextId", "");
  if (!contextId.empty()) {
    if (!runs().threads().threadInfo(contextId)) {
      return {{"tasks", json::array()}, {"nextPageToken", ""}, {"pageSize", 0}, {"totalSize", 0}};
    }
    list.threadId = contextId;
  }
  if (params.contains("status")) {
    const json& s = params["status"];
    if (s.is_string()) {
      list.status = runStatusFromA2a(s.get<std::string>());
    } else if (!s.is_null()) {
      throw a2aInvalidParams("status: a TaskState name");
    }
  }
  size_t pageSize = 50;
  if (params.contains("pageSize") && !params["pageSize"].is_null()) {
    const json& n = params["pageSize"];
    if (!n.is_number_integer() || n.get<int64_t>() < 1 ||
        n.get<int64_t>() > static_cast<int64_t>(limits_.maxPageSize)) {
      throw a2aInvalidParams("pageSize: 1 to " + std::to_string(limits_.maxPageSize) +
                             " (A2aLimits::maxPageSize)");
    }
    pageSize = n.get<size_t>();
  }
  // The page token is the offset in submit order (oldest first): runs are only added at the
  // end, so a token stays good while new tasks come.
  size_t offset = 0;
  if (const std::string token = params.value("pageToken", ""); !token.empty()) {
    const auto n = token.starts_with("o") ? parseInt(token.substr(1)) : std::nullopt;
    if (!n || *n < 0 || *n > 1'000'000'000) throw a2aInvalidParams("pageToken: not one we gave");
    offset = static_cast<size_t>(*n);
  }
  const auto history = historyLength(params, limits_);
  const bool artifacts = params.value("includeArtifacts", false);
  list.limit = pageSize + 1;
  list.offset = offset;
  auto found = runs().listRuns(list);
  const bool more = found.size() > pageSize;
  if (more) found.pop_back();
  json tasks = json::array();
  for (const auto& run : found)
    tasks.push_back(task(run, history.value_or(0), artifacts));
  // totalSize: counted for the whole store by status, else the runs of the one context.
  int64_t total = 0;
  if (list.threadId.empty()) {
    for (const auto& [status, n] : runs().countRuns())
      if (!list.status || status == *list.status) total += n;
  } else {
    total = static_cast<int64_t>(offset + found.size());
    if (more) {
      RunListOptions rest = list;
      rest.limit = runs().options().limits.maxPage;
      for (rest.offset = offset + found.size();; rest.offset += rest.limit) {
        const auto page = runs().listRuns(rest);
        total += static_cast<int64_t>(page.size());
        if (page.size() < rest.limit || rest.offset > 100'000) break;
      }
    }
  }
  return {{"tasks", std::move(tasks)},
          {"nextPageToken", more ? "o" + std::to_string(offset + found.size()) : ""},
          {"pageSize", static_cast<int64_t>(pageSize)},
          {"totalSize", total}};
}

void A2aRoutes::stream(httplib::Response& res, const RunInfo& run, int64_t after,
                       A2aFraming framing) {
  if (state_.feeds->streams() >= state_.options.maxStreams) {
    throw a2aInternal("the service serves " + std::to_string(state_.options.maxStreams) +
                      " event streams at most (ServiceOptions::maxStreams); try again later");
  }
  auto encoder = std::make_shared<A2aTaskEncoder>(replay(run, after));
  const std::string threadId = run.threadId;
  auto feed = state_.feeds->subscribe(threadId, after);
  state_.metrics.streamOpened();
  struct Stream {
    int64_t after;
    json first;
    bool ended = false;
  };
  // The task as it is now, then what happens to it.
  RunInfo now = mustTask(run.id);
  auto stream =
      std::make_shared<Stream>(Stream{after, {{"task", a2aTask(now, encoder->answer())}}});
  auto frame = [framing](const json& response, int64_t seq) {
    json data = framing.jsonRpc ? json{{"jsonrpc", "2.0"}, {"id", framing.id}, {"result", response}}
                                : response;
    std::string out = seq > 0 ? "id: " + std::to_string(seq) + "\n" : std::string();
    return out + "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  };
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, threadId, feed, stream, encoder, frame](size_t, httplib::DataSink& sink) {
        if (stream->ended) {
          sink.done();
          return true;
        }
        std::string out;
        if (!stream->first.is_null()) {
          out = frame(stream->first, stream->after);
          stream->first = nullptr;
          // A task that waits (or has ended) now: its stream is the task alone.
          if (encoder->ended()) stream->ended = true;
          return sink.write(out.data(), out.size());
        }
        for (;;) {
          std::vector<StoredEvent> events;
          try {
            events = runs().readEvents(threadId, stream->after, 256);
          } catch (const StoreError&) {
            if (!runs().threads().threadInfo(threadId)) {
              sink.done();
              return true;
            }
            throw;
          } catch (const std::exception& e) {
            state_.log("parley serve: A2A stream: " + std::string(e.what()));
            return false;
          }
          for (const auto& e : events) {
            stream->after = e.seq;
            for (const auto& response : encoder->feed(e))
              out += frame(response, e.seq);
            if (encoder->ended()) break;
          }
          if (encoder->ended()) stream->ended = true;
          if (!out.empty()) {
            state_.metrics.eventsSent(1);
            return sink.write(out.data(), out.size());
          }
          if (!events.empty()) continue;
          auto batch = state_.feeds->next(
              feed, stream->after, std::chrono::steady_clock::now() + state_.options.heartbeat);
          if (batch.parked) return true;  // called again when there is news
          if (batch.ended) {
            sink.done();
            return true;
          }
          if (batch.texts.empty()) {
            const std::string beat = ": heartbeat\n\n";
            return sink.write(beat.data(), beat.size());
          }
        }
      },
      [this, feed](bool) {
        state_.feeds->unsubscribe(feed);
        state_.metrics.streamClosed();
      });
}

// A handler's failure as an A2A error: what the store refuses as input is InvalidParams; the
// reason of anything else goes to the log only (a store's message may name the database).
A2aError a2aErrorOf(const ServiceState& state, const std::string& what) {
  try {
    throw;
  } catch (const A2aError& e) {
    return e;
  } catch (const ValidationError& e) {
    return a2aInvalidParams(e.what());
  } catch (const ApiError& e) {
    return e.status == 404 ? a2aTaskNotFound(e.what()) : a2aInvalidParams(e.what());
  } catch (const std::exception& e) {
    state.log("parley serve: " + what + ": " + e.what());
    return a2aInternal("the request failed on the server; its log says why");
  }
}

void A2aRoutes::jsonRpc(const httplib::Request& req, httplib::Response& res) {
  json id = nullptr;
  try {
    const std::string version = req.get_header_value("A2A-Version");
    json body = parseJson(req.body, {}, false);
    if (body.is_discarded()) throw a2aParseError("the body is not JSON (or nests too deeply)");
    if (!body.is_object() || body.value("jsonrpc", "") != "2.0" || !body.contains("method") ||
        !body["method"].is_string()) {
      throw a2aInvalidRequest("a JSON-RPC 2.0 request object with a method");
    }
    if (body.contains("id") && (body["id"].is_string() || body["id"].is_number_integer()))
      id = body["id"];
    if (!version.empty() && version != "1.0" && version != "1")
      throw a2aVersionNotSupported(version);
    const std::string method = body["method"];
    const json params = body.value("params", json::object());
    if (!params.is_object()) throw a2aInvalidParams("params: an object");
    json result;
    if (method == "SendMessage") {
      result = sendMessage(params);
    } else if (method == "SendStreamingMessage") {
      return sendStreaming(params, res, {true, id});
    } else if (method == "SubscribeToTask") {
      return subscribe(params.value("id", ""), req, res, {true, id});
    } else if (method == "GetTask") {
      result = getTask(params);
    } else if (method == "ListTasks") {
      result = listTasks(params);
    } else if (method == "CancelTask") {
      result = cancelTask(params);
    } else if (method == "GetExtendedAgentCard") {
      result = card(req, true);
    } else if (method == "CreateTaskPushNotificationConfig") {
      result = pushCreate(params);
    } else if (method == "GetTaskPushNotificationConfig") {
      result = pushGet(params.value("taskId", ""), params.value("id", ""));
    } else if (method == "ListTaskPushNotificationConfigs") {
      result = pushList(params.value("taskId", ""));
    } else if (method == "DeleteTaskPushNotificationConfig") {
      result = pushDelete(params.value("taskId", ""), params.value("id", ""));
    } else {
      throw a2aMethodNotFound(method);
    }
    sendJson(res, 200, {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}});
  } catch (...) {
    const A2aError e = a2aErrorOf(state_, "A2A JSON-RPC");
    sendJson(res, 200, {{"jsonrpc", "2.0"}, {"id", id}, {"error", e.jsonRpcError()}});
  }
}

void A2aRoutes::rest(const httplib::Request& req, httplib::Response& res,
                     const std::function<void()>& handler) {
  try {
    const std::string version = req.get_header_value("A2A-Version");
    if (!version.empty() && version != "1.0" && version != "1")
      throw a2aVersionNotSupported(version);
    handler();
  } catch (...) {
    const A2aError e = a2aErrorOf(state_, "A2A " + req.method + " " + req.path);
    sendJson(res, e.httpStatus, e.restBody());
  }
}

// The query of GET /tasks as ListTasks' params.
json a2aListQuery(const httplib::Request& req) {
  json params = json::object();
  for (const char* name : {"contextId", "status", "pageToken"})
    if (req.has_param(name)) params[name] = req.get_param_value(name);
  for (const char* name : {"pageSize", "historyLength"}) {
    if (!req.has_param(name)) continue;
    const auto n = parseInt(req.get_param_value(name));
    if (!n) throw a2aInvalidParams(std::string(name) + ": an integer");
    params[name] = *n;
  }
  if (req.has_param("includeArtifacts")) {
    params["includeArtifacts"] = req.get_param_value("includeArtifacts") == "true";
  }
  return params;
}

json a2aRestBody(const httplib::Request& req) {
  if (req.body.empty()) return json::object();
  json body = parseJson(req.body, {}, false);
  if (body.is_discarded() || !body.is_object())
    throw a2aParseError("the body is not a JSON object");
  return body;
}

void A2aRoutes::install(const std::shared_ptr<A2aRoutes>& self, http::Server& server) {
  server.Get("/.well-known/agent-card.json",
             [self](const httplib::Request& req, httplib::Response& res) {
               res.set_header("Cache-Control", "max-age=60");
               sendJson(res, 200, self->card(req, false));
             });
  server.Post("/a2a/jsonrpc", [self](const httplib::Request& req, httplib::Response& res) {
    RequestSpan span(req);
    self->jsonRpc(req, res);
    span.finish(res);
  });
  // Every process delivers push notifications, for tasks of any process (docs/a2a.md).
  self->watch();
  const std::string base = "/a2a/rest";
  const std::string task = base + "/tasks/([^/:]+)";
  auto route = [self](std::function<void(const httplib::Request&, httplib::Response&)> f) {
    return [self, f](const httplib::Request& req, httplib::Response& res) {
      RequestSpan span(req);
      self->rest(req, res, [&] { f(req, res); });
      span.finish(res);
    };
  };
  server.Post(base + "/message:send", route([self](auto& req, auto& res) {
                sendJson(res, 200, self->sendMessage(a2aRestBody(req)));
              }));
  server.Post(base + "/message:stream", route([self](auto& req, auto& res) {
                self->sendStreaming(a2aRestBody(req), res, {});
              }));
  server.Get(base + "/tasks", route([self](auto& req, auto& res) {
               sendJson(res, 200, self->listTasks(a2aListQuery(req)));
             }));
  server.Get(task, route([self](auto& req, auto& res) {
               json params = a2aListQuery(req);
               params["id"] = std::string(req.matches[1]);
               sendJson(res, 200, self->getTask(params));
             }));
  server.Post(task + ":cancel", route([self](auto& req, auto& res) {
                sendJson(res, 200, self->cancelTask({{"id", std::string(req.matches[1])}}));
              }));
  // The specification's table says POST, its proto GET; the SDK sends POST. Both are served.
  auto subscribeRoute = route(
      [self](auto& req, auto& res) { self->subscribe(std::string(req.matches[1]), req, res, {}); });
  server.Post(task + ":subscribe", subscribeRoute);
  server.Get(task + ":subscribe", subscribeRoute);
  server.Post(task + "/pushNotificationConfigs", route([self](auto& req, auto& res) {
                json params = a2aRestBody(req);
                params["taskId"] = std::string(req.matches[1]);
                sendJson(res, 200, self->pushCreate(params));
              }));
  server.Get(task + "/pushNotificationConfigs", route([self](auto& req, auto& res) {
               sendJson(res, 200, self->pushList(std::string(req.matches[1])));
             }));
  server.Get(task + "/pushNotificationConfigs/([^/]+)", route([self](auto& req, auto& res) {
               sendJson(res, 200,
                        self->pushGet(std::string(req.matches[1]), std::string(req.matches[2])));
             }));
  server.Delete(task + "/pushNotificationConfigs/([^/]+)", route([self](auto& req, auto& res) {
                  sendJson(
                      res, 200,
                      self->pushDelete(std::string(req.matches[1]), std::string(req.matches[2])));
                }));
  server.Get(base + "/extendedAgentCard",
             route([self](auto& req, auto& res) { sendJson(res, 200, self->card(req, true)); }));
}

}  // namespace

void installA2aRoutes(http::Server& server, ServiceState& state) {
  // The handlers hold the routes; the state outlives them.
  A2aRoutes::install(std::make_shared<A2aRoutes>(state), server);
}

bool isA2aLongLived(std::string_view method, std::string_view path) {
  if (method != "POST" && method != "GET") return false;
  return (method == "POST" && (path == "/a2a/jsonrpc" || path == "/a2a/rest/message:send" ||
                               path == "/a2a/rest/message:stream" ||
                               (path.starts_with("/a2a/rest/tasks/") &&
                                (path.ends_with(":cancel") || path.ends_with(":subscribe"))))) ||
         (method == "GET" && path.starts_with("/a2a/rest/tasks/") && path.ends_with(":subscribe"));
}

}  // namespace parley::service
