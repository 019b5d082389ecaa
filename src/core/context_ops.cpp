#include "parley/context_ops.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <initializer_list>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "parley/errors.hpp"

namespace parley {

namespace {

using Index = MessageStore::Index;
using IndexVector = std::vector<Index>;

IndexVector toVector(const MessageStore::IndexList& list) {
  return list.toVector();
}

// --- pairing ------------------------------------------------------------------------------

IndexVector withoutViolations(const MessageStore& store, IndexVector view, size_t& removed) {
  for (;;) {
    IndexVector bad = pairingViolations(store, view);
    if (bad.empty()) return view;
    std::unordered_set<Index> drop(bad.begin(), bad.end());
    IndexVector kept;
    kept.reserve(view.size());
    for (Index i : view) {
      if (!drop.count(i)) kept.push_back(i);
    }
    removed += view.size() - kept.size();
    view = std::move(kept);
  }
}

void refuseNewViolations(const MessageStore& store, const IndexVector& before,
                         const IndexVector& after, const std::string& field) {
  IndexVector old = pairingViolations(store, before);
  std::unordered_set<Index> known(old.begin(), old.end());
  for (Index i : pairingViolations(store, after)) {
    if (known.count(i)) continue;
    const Message& m = store.stored(i);
    std::string what = m.role == Role::Tool
                           ? "the tool result for call \"" + m.toolCallId + "\""
                           : "the assistant message calling \"" + m.toolCalls.front().id + "\"";
    throw ValidationError(field, "would separate " + what +
                                     " from its tool-call group (an assistant tool-call message "
                                     "must be followed by the results of all its calls)");
  }
}

// --- truncate -----------------------------------------------------------------------------

size_t count(const std::optional<int64_t>& value, const char* field) {
  if (*value < 0) {
    throw ValidationError(std::string("truncate.") + field,
                          "must be a non-negative integer, got " + std::to_string(*value));
  }
  return static_cast<size_t>(*value);
}

IndexVector truncateList(IndexVector list, const TruncateOp& op) {
  auto keepRange = [&](size_t begin, size_t end) {
    list = IndexVector(list.begin() + static_cast<std::ptrdiff_t>(begin),
                       list.begin() + static_cast<std::ptrdiff_t>(end));
  };
  if (op.keepFirst) keepRange(0, std::min(count(op.keepFirst, "keepFirst"), list.size()));
  if (op.keepLast) {
    size_t k = std::min(count(op.keepLast, "keepLast"), list.size());
    keepRange(list.size() - k, list.size());
  }
  if (op.removeFirst) {
    keepRange(std::min(count(op.removeFirst, "removeFirst"), list.size()), list.size());
  }
  if (op.removeLast) {
    keepRange(0, list.size() - std::min(count(op.removeLast, "removeLast"), list.size()));
  }
  if (op.range) {
    const auto [start, end] = *op.range;
    if (start < 0 || end < start || end > static_cast<int64_t>(list.size())) {
      throw ValidationError("truncate.range",
                            "must satisfy 0 <= start <= end <= " + std::to_string(list.size()) +
                                " (the messages left at that step), got start " +
                                std::to_string(start) + ", end " + std::to_string(end));
    }
    keepRange(static_cast<size_t>(start), static_cast<size_t>(end));
  }
  return list;
}

IndexVector truncateView(const MessageStore& store, const TruncateOp& op) {
  if (!op.role) {
    if (op.keepOtherRoles) {
      throw ValidationError("truncate.keepOtherRoles", "needs truncate.role");
    }
    return truncateList(toVector(store.view()), op);
  }
  IndexVector kept = truncateList(toVector(store.roleIndex(*op.role)), op);
  if (!op.keepOtherRoles) return kept;
  std::unordered_set<Index> keptSet(kept.begin(), kept.end());
  IndexVector view;
  store.view().forEach(0, store.viewSize(), [&](Index i) {
    if (store.stored(i).role != *op.role || keptSet.count(i)) view.push_back(i);
  });
  return view;
}

// --- the operations -----------------------------------------------------------------------

struct Applier {
  MessageStore& store;
  ContextOperationResult& result;

  void operator()(const TruncateOp& op) {
    result.operation = "truncate";
    commitRepaired(truncateView(store, op));
  }

  void operator()(const InsertOp& op) {
    result.operation = "insert";
    const auto size = static_cast<int64_t>(store.viewSize());
    if (op.position < -1 || op.position > size) {
      throw ValidationError("insert.position", "must be -1 (append) or 0.." + std::to_string(size) +
                                                   ", got " + std::to_string(op.position));
    }
    if (op.messages.empty()) throw ValidationError("insert.messages", "must not be empty");
    IndexVector before = toVector(store.view());
    IndexVector added;
    for (size_t k = 0; k < op.messages.size(); ++k) {
      try {
        added.push_back(store.appendHidden(op.messages[k]));
      } catch (const ValidationError& e) {
        throw ValidationError("insert.messages[" + std::to_string(k) + "]" + e.field().substr(7),
                              e.reason());
      }
    }
    IndexVector after = before;
    const size_t at = op.position == -1 ? before.size() : static_cast<size_t>(op.position);
    after.insert(after.begin() + static_cast<std::ptrdiff_t>(at), added.begin(), added.end());
    refuseNewViolations(store, before, after, "insert.position");
    store.commitView(after);
  }

  void operator()(const ReplaceOp& op) {
    result.operation = "replace";
    const auto size = static_cast<int64_t>(store.viewSize());
    if (op.index < 0 || op.index >= size) {
      throw ValidationError("replace.index", "must be a view position 0.." +
                                                 std::to_string(size - 1) + ", got " +
                                                 std::to_string(op.index));
    }
    IndexVector before = toVector(store.view());
    Index replacement;
    try {
      replacement = store.appendHidden(op.message);
    } catch (const ValidationError& e) {
      throw ValidationError("replace.message" + e.field().substr(7), e.reason());
    }
    IndexVector after = before;
    after[static_cast<size_t>(op.index)] = replacement;
    refuseNewViolations(store, before, after, "replace.message");
    store.commitView(after);
  }

  void operator()(const ClearOp& op) {
    result.operation = "clear";
    IndexVector view;
    if (op.keepSystemMessage) view = toVector(store.roleIndex(Role::System));
    commitRepaired(std::move(view));
  }

  void operator()(const FilterOp& op) {
    result.operation = "filter";
    IndexVector view;
    store.view().forEach(0, store.viewSize(), [&](Index i) {
      const Message& m = store.stored(i);
      if (!op.roles.empty() &&
          std::find(op.roles.begin(), op.roles.end(), m.role) == op.roles.end()) {
        return;
      }
      auto contains = [&](const std::string& needle) {
        return m.content.find(needle) != std::string::npos;
      };
      if (!op.contentContains.empty() &&
          std::none_of(op.contentContains.begin(), op.contentContains.end(), contains)) {
        return;
      }
      if (std::any_of(op.contentExcludes.begin(), op.contentExcludes.end(), contains)) return;
      view.push_back(i);
    });
    commitRepaired(std::move(view));
  }

  void commitRepaired(IndexVector view) {
    view = withoutViolations(store, std::move(view), result.removedForPairing);
    store.commitView(view);
  }
};

// --- JSON config --------------------------------------------------------------------------

void requireKeys(const json& object, const std::string& field,
                 std::initializer_list<const char*> allowed) {
  if (!object.is_object()) throw ValidationError(field, "must be an object");
  for (const auto& item : object.items()) {
    const std::string& key = item.key();
    if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; })) {
      std::string list;
      for (const char* a : allowed)
        list += (list.empty() ? "" : ", ") + std::string(a);
      throw ValidationError(field + "." + key,
                            "is not a known option (expected one of: " + list + ")");
    }
  }
}

std::optional<int64_t> optionalInt(const json& object, const char* key, const std::string& field) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) {
    throw ValidationError(field + "." + key,
                          "must be an integer, got " + std::string(it->type_name()));
  }
  return it->get<int64_t>();
}

std::vector<std::string> stringList(const json& object, const char* key, const std::string& field) {
  std::vector<std::string> out;
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return out;
  if (!it->is_array()) throw ValidationError(field + "." + key, "must be an array of strings");
  for (size_t i = 0; i < it->size(); ++i) {
    if (!(*it)[i].is_string()) {
      throw ValidationError(field + "." + key + "[" + std::to_string(i) + "]", "must be a string");
    }
    out.push_back((*it)[i].get<std::string>());
  }
  return out;
}

const json& section(const json& config, const char* name) {
  auto it = config.find(name);
  if (it == config.end() || it->is_null()) {
    throw ValidationError(name,
                          std::string("configuration is required for operation \"") + name + "\"");
  }
  return *it;
}

Message messageAt(const json& value, const std::string& field) {
  try {
    return messageFromJson(value);
  } catch (const ValidationError& e) {
    throw ValidationError(field + e.field().substr(7), e.reason());
  }
}

}  // namespace

std::vector<MessageStore::Index> pairingViolations(const MessageStore& store,
                                                   const std::vector<MessageStore::Index>& view) {
  IndexVector bad;
  size_t i = 0;
  while (i < view.size()) {
    const Message& m = store.stored(view[i]);
    if (m.role == Role::Tool) {
      bad.push_back(view[i++]);
      continue;
    }
    if (m.role != Role::Assistant || m.toolCalls.empty()) {
      ++i;
      continue;
    }
    std::unordered_set<std::string_view> calls;
    for (const ToolCall& call : m.toolCalls)
      calls.insert(call.id);
    size_t end = i + 1;
    while (end < view.size() && store.stored(view[end]).role == Role::Tool)
      ++end;
    std::unordered_set<std::string_view> answered;
    IndexVector extras;
    for (size_t k = i + 1; k < end; ++k) {
      const std::string& id = store.stored(view[k]).toolCallId;
      if (calls.count(id) && answered.insert(id).second) continue;
      extras.push_back(view[k]);
    }
    if (answered.size() != calls.size()) {
      for (size_t k = i; k < end; ++k)
        bad.push_back(view[k]);
    } else {
      bad.insert(bad.end(), extras.begin(), extras.end());
    }
    i = end;
  }
  return bad;
}

ContextOperationResult applyContextOperation(MessageStore& store, const ContextOperation& op) {
  const auto started = std::chrono::steady_clock::now();
  ContextOperationResult result;
  MessageStore work = store;  // cheap; keeps `store` unchanged if the operation throws
  std::visit(Applier{work, result}, op);
  store = std::move(work);
  result.messageCount = store.viewSize();
  result.executionTime = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - started);
  return result;
}

ContextOperationResult applyContextOperation(ConversationManager& manager,
                                             const ContextOperation& op) {
  ContextOperationResult result;
  manager.modifyStore([&](MessageStore& store) { result = applyContextOperation(store, op); });
  return result;
}

std::optional<ContextOperation> systemPromptOperation(const ConversationManager& manager,
                                                      const std::string& prompt) {
  const std::vector<Message> first = manager.getMessagesByRange(0, 1);
  const bool opensWithSystem = !first.empty() && first.front().role == Role::System;
  if (prompt.empty()) {
    if (!opensWithSystem) return std::nullopt;
    return TruncateOp{.removeFirst = 1};
  }
  if (!opensWithSystem) return InsertOp{0, {Message::system(prompt)}};
  if (first.front() == Message::system(prompt)) return std::nullopt;
  return ReplaceOp{0, Message::system(prompt)};
}

bool isDryRun(const json& config) {
  if (!config.is_object()) return false;
  auto it = config.find("dryRun");
  if (it == config.end()) return false;
  if (!it->is_boolean()) throw ValidationError("dryRun", "must be true or false");
  return it->get<bool>();
}

ContextOperationPreview previewContextEdit(const ConversationManager& manager,
                                           std::string operation,
                                           const std::function<void(ConversationManager&)>& edit,
                                           const std::vector<Message>& pending) {
  ContextOperationPreview p;
  p.operation = std::move(operation);
  ConversationManager copy = manager.clone();
  edit(copy);
  const MessageStore before = manager.store();
  const MessageStore after = copy.store();
  p.messagesBefore = before.viewSize();
  p.messagesAfter = after.viewSize();
  size_t same = 0;
  const size_t common = std::min(p.messagesBefore, p.messagesAfter);
  while (same < common && before.view()[same] == after.view()[same])
    ++same;
  if (same < p.messagesBefore) p.firstChangedMessage = same;
  p.cacheWithout = manager.diagnoseCache(pending);
  p.cacheWith = copy.diagnoseCache(pending);
  if (p.cacheWithout && p.cacheWith) {
    p.destroyedPrefixTokens =
        p.cacheWithout->reusablePrefixTokens - p.cacheWith->reusablePrefixTokens;
    p.destroyedPrefixBytes = p.cacheWithout->reusablePrefixBytes - p.cacheWith->reusablePrefixBytes;
  } else if (p.firstChangedMessage) {
    const ConversationOptions& config = manager.options();
    const TokenCounter counter = config.tokenCounter ? *config.tokenCounter : TokenCounter();
    const MessageJsonOptions jsonOptions =
        config.llm ? config.llm->messageJsonOptions() : MessageJsonOptions{};
    for (size_t i = same; i < p.messagesBefore; ++i) {
      const Message& m = before.visible(i);
      p.destroyedPrefixTokens += countMessageTokens(m, counter).tokens;
      p.destroyedPrefixBytes += static_cast<int64_t>(encodeMessage(m, jsonOptions).size());
    }
  }
  p.promptTokensBefore = manager.countPromptTokens(pending).tokens;
  p.promptTokensAfter = copy.countPromptTokens(pending).tokens;
  p.savedTokens = p.promptTokensBefore - p.promptTokensAfter;
  return p;
}

ContextOperationPreview previewContextOperation(const ConversationManager& manager,
                                                const ContextOperation& op,
                                                const std::vector<Message>& pending) {
  ContextOperationResult applied;
  ContextOperationPreview p = previewContextEdit(
      manager, "", [&](ConversationManager& copy) { applied = applyContextOperation(copy, op); },
      pending);
  p.operation = applied.operation;
  p.removedForPairing = applied.removedForPairing;
  return p;
}

json toJson(const ContextOperationPreview& p) {
  auto cache = [](const std::optional<CacheDiagnostic>& d) { return d ? toJson(*d) : json(); };
  return {{"operation", p.operation},
          {"messagesBefore", p.messagesBefore},
          {"messagesAfter", p.messagesAfter},
          {"removedForPairing", p.removedForPairing},
          {"firstChangedMessage", p.firstChangedMessage ? json(*p.firstChangedMessage) : json()},
          {"destroyedPrefixTokens", p.destroyedPrefixTokens},
          {"destroyedPrefixBytes", p.destroyedPrefixBytes},
          {"promptTokensBefore", p.promptTokensBefore},
          {"promptTokensAfter", p.promptTokensAfter},
          {"savedTokens", p.savedTokens},
          {"cacheWithout", cache(p.cacheWithout)},
          {"cacheWith", cache(p.cacheWith)}};
}

bool isContextRead(const json& config) {
  return config.is_object() && config.value("operation", json()) == "read";
}

ContextRead parseContextRead(const json& config) {
  if (!config.is_object()) throw ValidationError("config", "must be a JSON object");
  for (const auto& [key, value] : config.items()) {
    if (key != "operation" && key != "read") {
      throw ValidationError(key, "does not belong to operation \"read\"");
    }
  }
  ContextRead read;
  auto spec = config.find("read");
  if (spec == config.end() || spec->is_null()) return read;
  const json& c = *spec;
  requireKeys(c, "read", {"role", "last", "range", "into"});
  read.last = optionalInt(c, "last", "read");
  if (read.last && *read.last < 0) {
    throw ValidationError("read.last", "must be a non-negative integer");
  }
  if (auto range = c.find("range"); range != c.end() && !range->is_null()) {
    requireKeys(*range, "read.range", {"start", "end"});
    auto start = optionalInt(*range, "start", "read.range");
    auto end = optionalInt(*range, "end", "read.range");
    if (!start || !end) throw ValidationError("read.range", "needs both start and end");
    if (*start < 0 || *end < *start) {
      throw ValidationError("read.range", "needs 0 <= start <= end");
    }
    read.range = ContextRead::Range{*start, *end};
  }
  if (read.last && read.range) {
    throw ValidationError("read", "give either last or range, not both");
  }
  if (auto role = c.find("role"); role != c.end() && !role->is_null()) {
    if (!role->is_string()) throw ValidationError("read.role", "must be a string");
    read.role = roleFromString(role->get<std::string>(), "read.role");
  }
  if (auto into = c.find("into"); into != c.end() && !into->is_null()) {
    if (*into == "result") {
      read.into = ContextRead::Into::Result;
    } else if (*into == "prompt") {
      read.into = ContextRead::Into::Prompt;
    } else {
      throw ValidationError("read.into", "must be \"result\" or \"prompt\"");
    }
  }
  return read;
}

std::vector<Message> readContext(const ConversationManager& manager, const ContextRead& read) {
  const auto count = [](int64_t n) { return static_cast<size_t>(n); };
  if (read.role) {
    if (read.last) return manager.getRecentMessagesByRole(*read.role, count(*read.last));
    if (read.range) {
      return manager.getMessagesByRoleRange(*read.role, count(read.range->start),
                                            count(read.range->end));
    }
    return manager.getMessagesByRole(*read.role);
  }
  if (read.last) return manager.getRecentMessages(count(*read.last));
  if (read.range) {
    return manager.getMessagesByRange(count(read.range->start), count(read.range->end));
  }
  return manager.getMessages();
}

std::string contextText(const std::vector<Message>& messages) {
  std::string text;
  for (const Message& m : messages) {
    if (!text.empty()) text += '\n';
    text += std::string(toString(m.role)) + ": " + m.content;
    for (const ToolCall& call : m.toolCalls) {
      text += " [call " + call.name + "(" + (call.arguments.empty() ? "{}" : call.arguments) + ")]";
    }
  }
  return text;
}

std::string promptWithContext(const std::string& prompt, const std::string& text) {
  static constexpr std::string_view kPlaceholder = "{{context}}";
  if (prompt.find(kPlaceholder) == std::string::npos) {
    return prompt.empty() ? text : prompt + "\n\n" + text;
  }
  std::string out;
  size_t from = 0;
  for (size_t at; (at = prompt.find(kPlaceholder, from)) != std::string::npos;
       from = at + kPlaceholder.size()) {
    out.append(prompt, from, at - from);
    out += text;
  }
  out.append(prompt, from);
  return out;
}

ContextOperation parseContextOperation(const json& config) {
  if (!config.is_object()) throw ValidationError("config", "must be a JSON object");
  auto opField = config.find("operation");
  if (opField == config.end() || !opField->is_string()) {
    throw ValidationError("operation",
                          "is required: one of truncate, insert, replace, clear, filter");
  }
  const std::string name = opField->get<std::string>();
  constexpr std::array<std::string_view, 5> kKnown = {"truncate", "insert", "replace", "clear",
                                                      "filter"};
  if (std::find(kKnown.begin(), kKnown.end(), name) == kKnown.end()) {
    throw ValidationError(
        "operation",
        "unknown operation \"" + name + "\" (expected truncate, insert, replace, clear or filter)");
  }
  isDryRun(config);  // a non-boolean dryRun is refused
  for (const auto& [key, value] : config.items()) {
    if (key != "operation" && key != name && key != "dryRun") {
      throw ValidationError(key, "does not belong to operation \"" + name + "\"");
    }
  }
  if (name == "truncate") {
    const json& c = section(config, "truncate");
    requireKeys(
        c, "truncate",
        {"keepFirst", "keepLast", "removeFirst", "removeLast", "range", "role", "keepOtherRoles"});
    TruncateOp op;
    op.keepFirst = optionalInt(c, "keepFirst", "truncate");
    op.keepLast = optionalInt(c, "keepLast", "truncate");
    op.removeFirst = optionalInt(c, "removeFirst", "truncate");
    op.removeLast = optionalInt(c, "removeLast", "truncate");
    if (auto range = c.find("range"); range != c.end() && !range->is_null()) {
      requireKeys(*range, "truncate.range", {"start", "end"});
      auto start = optionalInt(*range, "start", "truncate.range");
      auto end = optionalInt(*range, "end", "truncate.range");
      if (!start || !end) throw ValidationError("truncate.range", "needs both start and end");
      op.range = TruncateOp::Range{*start, *end};
    }
    if (auto role = c.find("role"); role != c.end() && !role->is_null()) {
      if (!role->is_string()) throw ValidationError("truncate.role", "must be a string");
      op.role = roleFromString(role->get<std::string>(), "truncate.role");
    }
    if (auto keep = c.find("keepOtherRoles"); keep != c.end() && !keep->is_null()) {
      if (!keep->is_boolean())
        throw ValidationError("truncate.keepOtherRoles", "must be a boolean");
      op.keepOtherRoles = keep->get<bool>();
    }
    return op;
  }
  if (name == "insert") {
    const json& c = section(config, "insert");
    requireKeys(c, "insert", {"position", "messages"});
    InsertOp op;
    auto position = optionalInt(c, "position", "insert");
    if (!position) throw ValidationError("insert.position", "is required (-1 appends)");
    op.position = *position;
    auto messages = c.find("messages");
    if (messages == c.end() || !messages->is_array()) {
      throw ValidationError("insert.messages", "is required and must be an array of messages");
    }
    for (size_t i = 0; i < messages->size(); ++i) {
      op.messages.push_back(
          messageAt((*messages)[i], "insert.messages[" + std::to_string(i) + "]"));
    }
    return op;
  }
  if (name == "replace") {
    const json& c = section(config, "replace");
    requireKeys(c, "replace", {"index", "message"});
    ReplaceOp op;
    auto index = optionalInt(c, "index", "replace");
    if (!index) throw ValidationError("replace.index", "is required");
    op.index = *index;
    auto message = c.find("message");
    if (message == c.end()) throw ValidationError("replace.message", "is required");
    op.message = messageAt(*message, "replace.message");
    return op;
  }
  if (name == "clear") {
    ClearOp op;
    if (auto c = config.find("clear"); c != config.end() && !c->is_null()) {
      requireKeys(*c, "clear", {"keepSystemMessage"});
      if (auto keep = c->find("keepSystemMessage"); keep != c->end() && !keep->is_null()) {
        if (!keep->is_boolean()) {
          throw ValidationError("clear.keepSystemMessage", "must be a boolean");
        }
        op.keepSystemMessage = keep->get<bool>();
      }
    }
    return op;
  }
  if (name == "filter") {
    const json& c = section(config, "filter");
    requireKeys(c, "filter", {"roles", "contentContains", "contentExcludes"});
    FilterOp op;
    for (const std::string& role : stringList(c, "roles", "filter")) {
      op.roles.push_back(roleFromString(role, "filter.roles"));
    }
    op.contentContains = stringList(c, "contentContains", "filter");
    op.contentExcludes = stringList(c, "contentExcludes", "filter");
    return op;
  }
  throw ValidationError(
      "operation",
      "unknown operation \"" + name + "\" (expected truncate, insert, replace, clear or filter)");
}

json toJson(const ContextOperation& operation) {
  struct Writer {
    json operator()(const TruncateOp& op) const {
      json c = json::object();
      if (op.keepFirst) c["keepFirst"] = *op.keepFirst;
      if (op.keepLast) c["keepLast"] = *op.keepLast;
      if (op.removeFirst) c["removeFirst"] = *op.removeFirst;
      if (op.removeLast) c["removeLast"] = *op.removeLast;
      if (op.range) c["range"] = {{"start", op.range->start}, {"end", op.range->end}};
      if (op.role) c["role"] = toString(*op.role);
      if (op.keepOtherRoles) c["keepOtherRoles"] = true;
      return {{"operation", "truncate"}, {"truncate", c}};
    }
    json operator()(const InsertOp& op) const {
      return {{"operation", "insert"},
              {"insert", {{"position", op.position}, {"messages", toJson(op.messages)}}}};
    }
    json operator()(const ReplaceOp& op) const {
      return {{"operation", "replace"},
              {"replace", {{"index", op.index}, {"message", toJson(op.message)}}}};
    }
    json operator()(const ClearOp& op) const {
      return {{"operation", "clear"}, {"clear", {{"keepSystemMessage", op.keepSystemMessage}}}};
    }
    json operator()(const FilterOp& op) const {
      json roles = json::array();
      for (Role r : op.roles)
        roles.push_back(toString(r));
      return {{"operation", "filter"},
              {"filter",
               {{"roles", roles},
                {"contentContains", op.contentContains},
                {"contentExcludes", op.contentExcludes}}}};
    }
  };
  return std::visit(Writer{}, operation);
}

}  // namespace parley
