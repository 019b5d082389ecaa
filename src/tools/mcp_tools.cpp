// ToolRegistry::addMcpServer(): an MCP server's tools as registry tools.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <system_error>

#include "parley/errors.hpp"
#include "parley/mcp.hpp"
#include "parley/thread_pool.hpp"
#include "parley/tools.hpp"

namespace parley {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// An MCP server whose tools a registry holds. The registry owns it; a refresh after
// notifications/tools/list_changed runs on the shared pool and holds it by weak_ptr.
struct detail::McpAttachment {
  std::shared_ptr<McpClient> client;
  std::mutex refreshing;             // one listing + registration at a time
  std::atomic<bool> busy{false};     // set while `refreshing` is held
  std::atomic<bool> queued{false};   // a refresh waits on the pool: more notices add nothing
  std::mutex mutex;                  // registry and registered
  ToolRegistry* registry = nullptr;  // null once the registry is being destroyed
  std::vector<std::string> registered;
  std::string listed;  // the tools as last listed (JSON), to tell a change from a re-read
};

namespace {

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool validServerName(const std::string& name) {
  if (name.empty() || name.size() > 32) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

// The registry name of a server's tool.
std::string exposedName(const McpServerOptions& options, const std::string& tool) {
  std::string name = options.prefixToolNames ? options.name + "__" + tool : tool;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') c = '_';
  }
  return name;
}

// A boolean annotation of a tool, or `otherwise` when absent or not a boolean.
bool hint(const McpTool& tool, const char* name, bool otherwise) {
  if (!tool.annotations.is_object()) return otherwise;
  auto found = tool.annotations.find(name);
  return found != tool.annotations.end() && found->is_boolean() ? found->get<bool>() : otherwise;
}

}  // namespace

bool mcpToolNeedsApproval(const McpServerOptions& options, const McpTool& tool) {
  switch (options.approval) {
    case McpApproval::Never:
      return false;
    case McpApproval::Always:
      return true;
    case McpApproval::Listed:
      return contains(options.approveTools, tool.name);
    case McpApproval::Destructive:
      // The specification's defaults: readOnlyHint false, destructiveHint true.
      return !hint(tool, "readOnlyHint", false) && hint(tool, "destructiveHint", true);
  }
  return true;
}

bool mcpToolIsIdempotent(const McpTool& tool) {
  return hint(tool, "readOnlyHint", false) || hint(tool, "idempotentHint", false);
}

namespace {

// The executor requests the stop token at the call's deadline and reports the timeout itself;
// the call's own timeout is a backstop a little later, so that the stop token is what ends it
// (and the server is told) rather than a race between the two.
constexpr std::chrono::milliseconds kBackstop{1000};

// A form or page as a question for ToolContext::ask (a durable run's own question).
json elicitationQuestion(const McpElicitation& request) {
  json question = {{"kind", "elicitation"},
                   {"server", request.server},
                   {"mode", request.mode},
                   {"message", request.message}};
  if (request.mode == "url")
    question["url"] = request.url;
  else
    question["requestedSchema"] = request.requestedSchema;
  return question;
}

// The caller's answer: {"action": "accept", "content": {...}}, {"action": "decline"} or
// {"action": "cancel"}. The form's own check (mcp_elicitation.cpp) follows.
McpElicitationAnswer elicitationAnswer(const json& answer) {
  std::string action =
      answer.is_object() && answer.contains("action") && answer["action"].is_string()
          ? answer["action"].get<std::string>()
          : std::string();
  McpElicitationAnswer out;
  if (action == "accept") {
    out.action = McpElicitationAnswer::Action::Accept;
    if (auto content = answer.find("content"); content != answer.end()) {
      if (!content->is_object())
        throw ValidationError("response.content", "must be an object of the form's values");
      out.content = *content;
    }
  } else if (action == "decline") {
    out.action = McpElicitationAnswer::Action::Decline;
  } else if (action == "cancel") {
    out.action = McpElicitationAnswer::Action::Cancel;
  } else {
    throw ValidationError("response",
                          "the answer to a server's form must be an object with "
                          "\"action\": \"accept\" (and \"content\"), \"decline\" "
                          "or \"cancel\"");
  }
  return out;
}

ToolHandler mcpHandler(std::weak_ptr<McpClient> weak, std::string server, std::string tool,
                       bool structured) {
  return [weak = std::move(weak), server = std::move(server), tool = std::move(tool), structured](
             const json& args, ToolContext& context) -> json {
    std::shared_ptr<McpClient> client = weak.lock();
    if (!client) throw std::runtime_error("the MCP server \"" + server + "\" is closed");
    McpCallOptions call;
    call.cancel = context.stopToken;
    if (context.ask) {
      // The caller asks (a durable run: the run waits for the answer and runs the call again).
      call.onElicitation = [asking = context](const McpElicitation& request, std::stop_token) {
        return elicitationAnswer(asking.ask(asking, elicitationQuestion(request)));
      };
    }
    // The tasks extension: the task's id is the handle a durable run keeps; a call given it back
    // follows that task instead of calling the tool again.
    if (context.checkpoint) {
      call.onTask = [&context, server](const std::string& taskId) {
        context.checkpoint(context, {{"server", server}, {"task", taskId}});
      };
    }
    if (context.resumeFrom.is_object() && context.resumeFrom.value("server", json()) == server &&
        context.resumeFrom.value("task", json()).is_string())
      call.resumeTask = context.resumeFrom["task"].get<std::string>();
    call.timeout =
        kBackstop +
        std::max(std::chrono::milliseconds(0),
                 std::chrono::ceil<std::chrono::milliseconds>(context.deadline - Clock::now()));
    McpToolResult result;
    try {
      result = client->callTool(tool, args, call);
    } catch (const McpError& e) {
      // -32602 is JSON-RPC's "invalid params": the model's arguments, which it can fix.
      if (e.code() == -32602) throw ValidationError("arguments", e.what());
      throw;
    }
    json forModel = result.forModel(structured);
    if (result.isError)
      throw std::runtime_error(forModel.is_string() ? forModel.get<std::string>()
                                                    : forModel.dump());
    return forModel;
  };
}

// Adds the tools `allow`/`deny` let through; returns the names added and fills `skipped`.
std::vector<std::string> addTools(ToolRegistry& registry, const std::shared_ptr<McpClient>& client,
                                  const std::vector<McpTool>& tools,
                                  std::vector<std::string>* skipped) {
  const McpServerOptions& options = client->options();
  std::vector<std::string> added;
  for (const McpTool& tool : tools) {
    if (!options.allow.empty() && !contains(options.allow, tool.name)) continue;
    if (contains(options.deny, tool.name)) continue;
    if (!tool.unusable.empty()) {
      if (skipped) skipped->push_back(tool.name + ": " + tool.unusable);
      continue;
    }
    ToolOptions toolOptions;
    toolOptions.timeout = options.toolTimeout;
    toolOptions.requiresApproval = mcpToolNeedsApproval(options, tool);
    toolOptions.idempotent = mcpToolIsIdempotent(tool);
    std::string description = tool.description.empty() ? tool.title : tool.description;
    std::string name = exposedName(options, tool.name);
    try {
      registry.add(name, description, tool.inputSchema,
                   // A tool that declares an outputSchema answers with checked JSON: the
                   // model gets that rather than its text rendering.
                   mcpHandler(client, options.name, tool.name,
                              options.useStructuredContent || tool.outputSchema.is_object()),
                   toolOptions);
      added.push_back(name);
    } catch (const ValidationError& e) {
      if (skipped) skipped->push_back(tool.name + ": " + e.what());
    }
  }
  return added;
}

// What a listing said, to compare with the next one.
std::string listedText(const std::vector<McpTool>& tools) {
  json all = json::array();
  for (const McpTool& tool : tools)
    all.push_back({tool.name, tool.title, tool.description, tool.inputSchema, tool.outputSchema,
                   tool.annotations, tool.unusable});
  return all.dump();
}

}  // namespace

void ToolRegistry::refreshMcpTools(const std::shared_ptr<detail::McpAttachment>& attachment,
                                   bool onlyIfStale) {
  std::unique_lock serial(attachment->refreshing, std::defer_lock);
  if (onlyIfStale) {
    // A refresh under way (or this thread's own, from a callback, which must not take the lock
    // again) will do.
    if (attachment->busy || !serial.try_lock() || !attachment->client->toolListStale()) return;
  } else {
    serial.lock();
  }
  attachment->busy = true;
  struct Done {
    std::atomic<bool>& busy;
    ~Done() { busy = false; }
  } done{attachment->busy};
  std::vector<McpTool> tools;
  try {
    tools = attachment->client->listTools();
  } catch (const Error&) {
    return;  // the server went away; its tools stay (a stale list may serve) and calls say why
  }
  std::string listed = listedText(tools);
  // Under the lock, so that the callback never runs after the registry is gone.
  std::lock_guard lock(attachment->mutex);
  ToolRegistry* registry = attachment->registry;
  if (!registry) return;
  const auto& callback = attachment->client->options().onToolsRefreshed;
  // The same tools again: nothing changes, so the prompt cache keeps its prefix. The callback
  // still hears of a refresh the server asked for.
  if (listed == attachment->listed) {
    if (callback && !onlyIfStale) callback(attachment->registered);
    return;
  }
  std::size_t position = SIZE_MAX;
  {
    std::lock_guard registryLock(registry->mutex_);
    for (const std::string& name : attachment->registered) {
      auto found = std::find(registry->order_.begin(), registry->order_.end(), name);
      if (found != registry->order_.end())
        position = std::min(position, static_cast<std::size_t>(found - registry->order_.begin()));
    }
  }
  for (const std::string& name : attachment->registered)
    registry->remove(name);
  attachment->registered = addTools(*registry, attachment->client, tools, nullptr);
  attachment->listed = std::move(listed);
  registry->placeTools(attachment->registered, position);
  if (callback) callback(attachment->registered);
}

void ToolRegistry::refreshStaleMcpTools() const {
  std::vector<std::shared_ptr<detail::McpAttachment>> servers;
  {
    std::lock_guard lock(mutex_);
    if (mcpServers_.empty()) return;
    servers = mcpServers_;
  }
  for (const auto& attachment : servers)
    if (attachment->client->toolListStale()) refreshMcpTools(attachment, true);
}

void ToolRegistry::placeTools(const std::vector<std::string>& names, std::size_t position) {
  std::lock_guard lock(mutex_);
  std::vector<std::string> rest;
  for (const std::string& name : order_)
    if (!contains(names, name)) rest.push_back(name);
  position = std::min(position, rest.size());
  rest.insert(rest.begin() + static_cast<std::ptrdiff_t>(position), names.begin(), names.end());
  if (rest == order_) return;
  order_ = std::move(rest);
  ++revision_;
  definitions_.reset();
}

McpRegistration ToolRegistry::addMcpServer(const std::string& name, McpServerOptions options) {
  if (!validServerName(name))
    throw ValidationError("mcp.name", "\"" + name +
                                          "\" is not a valid server name: use 1 to 32 letters, "
                                          "digits, '_' or '-'");
  options.name = name;
  auto attachment = std::make_shared<detail::McpAttachment>();
  attachment->client = std::make_shared<McpClient>(std::move(options));
  attachment->registry = this;
  {
    std::lock_guard lock(mutex_);
    if (mcpServers_.size() >= kMaxMcpServersPerRegistry)
      throw ValidationError("mcp", "a registry takes at most " +
                                       std::to_string(kMaxMcpServersPerRegistry) + " MCP servers");
    for (const auto& other : mcpServers_) {
      if (other->client->options().name == name)
        throw ValidationError("mcp.name", "an MCP server named \"" + name + "\" is already added");
    }
    mcpServers_.push_back(attachment);  // holds the slot while connecting
  }
  auto unregister = [&] {
    std::lock_guard lock(mutex_);
    mcpServers_.erase(std::find(mcpServers_.begin(), mcpServers_.end(), attachment));
  };

  McpRegistration registration;
  registration.client = attachment->client;
  try {
    std::weak_ptr<detail::McpAttachment> weak = attachment;
    attachment->client->onToolsChanged([weak] {
      // On a transport thread, which must not wait for the listing it would have to read.
      auto attachment = weak.lock();
      if (!attachment || attachment->queued.exchange(true)) return;
      try {
        ThreadPool::shared()->submit([weak] {
          auto alive = weak.lock();
          if (!alive) return;
          alive->queued = false;  // a notice from now on needs another listing
          refreshMcpTools(alive, false);
        });
      } catch (const std::system_error&) {
        attachment->queued = false;  // no thread to be had: the tools stay as they were listed
      }
    });
    std::lock_guard serial(attachment->refreshing);
    attachment->busy = true;
    struct Done {
      std::atomic<bool>& busy;
      ~Done() { busy = false; }
    } done{attachment->busy};
    std::vector<McpTool> tools = attachment->client->listTools();
    std::lock_guard lock(attachment->mutex);
    attachment->registered = addTools(*this, attachment->client, tools, &registration.skipped);
    attachment->listed = listedText(tools);
    registration.tools = attachment->registered;
  } catch (...) {
    unregister();
    attachment->client->close();
    throw;
  }
  return registration;
}

void ToolRegistry::closeMcpServers() noexcept {
  std::vector<std::shared_ptr<detail::McpAttachment>> servers;
  {
    std::lock_guard lock(mutex_);
    servers = std::move(mcpServers_);
  }
  for (const auto& attachment : servers) {
    {
      std::lock_guard lock(attachment->mutex);
      attachment->registry = nullptr;
    }
    attachment->client->close();
  }
}

}  // namespace parley
