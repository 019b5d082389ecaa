// The assistants of the Agent Protocol / LangGraph API (docs/service.md, "Assistants"): the
// workers' profiles, read-only, and the assistants created over HTTP (create, get, update as a
// new version, delete, search, count, versions, set the version runs use). The settings live in
// service/assistants.hpp; this file reads and answers the requests.
#include <algorithm>
#include <cctype>

#include "parley/iso_time.hpp"
#include "service/agent_protocol_impl.hpp"
#include "service/assistants.hpp"
#include "store/sql_store.hpp"

namespace parley::service {

using json = nlohmann::json;

namespace {

json versionJson(const detail::AssistantVersion& v) {
  return {{"assistant_id", v.id},
          {"graph_id", v.graphId},
          {"name", v.name},
          {"description", v.description ? json(*v.description) : json(nullptr)},
          {"config", v.config},
          {"context", v.context},
          {"metadata", v.metadata},
          {"version", v.version},
          {"created_at", isoTime(v.createdAt)}};
}

json createdJson(const detail::StoredAssistant& a) {
  json out = versionJson(a.current);
  out["created_at"] = isoTime(a.createdAt);
  out["updated_at"] = isoTime(a.updatedAt);
  return out;
}

json profileJson(const std::string& id) {
  const std::string epoch = isoTime(std::chrono::system_clock::time_point{});
  const bool byDefault = id == kDefaultAssistant;
  return {{"assistant_id", id},
          {"graph_id", id},
          {"name", id},
          {"description",
           byDefault ? "the workers' default profile" : "the workers' profile '" + id + "'"},
          {"config", {{"configurable", {{"profile", byDefault ? "" : id}}}}},
          {"context", json::object()},
          {"metadata", {{"created_by", "system"}}},
          {"version", 1},
          {"created_at", epoch},
          {"updated_at", epoch}};
}

std::string lowered(std::string text) {
  for (char& c : text)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// A text field within its cap; ApError 400 naming it.
std::string cappedText(const json& value, const char* field, size_t cap, bool allowEmpty) {
  if (!value.is_string())
    throw apBadRequest("invalid_" + std::string(field), std::string(field) + " is a string");
  std::string text = value.get<std::string>();
  if ((!allowEmpty && text.empty()) || text.size() > cap) {
    throw apBadRequest("invalid_" + std::string(field), std::string(field) + " must be " +
                                                            (allowEmpty ? "0" : "1") + " to " +
                                                            std::to_string(cap) + " bytes");
  }
  return text;
}

}  // namespace

Assistants& AgentProtocol::Impl::assistants() const {
  return *state.assistants;
}

detail::AssistantStore& AgentProtocol::Impl::assistantStore() const {
  auto* store = assistants().store();
  if (!store) {
    throw apBadRequest("unsupported",
                       "this service's store keeps no assistants (it is not "
                       "SQLite or PostgreSQL); its profiles are the assistants");
  }
  return *store;
}

std::string AgentProtocol::Impl::profileOf(const std::string& assistantId) const {
  checkId(assistantId, "assistant");
  return assistantId == kDefaultAssistant ? "" : assistantId;
}

void AgentProtocol::Impl::applyAssistant(const std::string& assistantId, SubmitOptions& submit,
                                         const std::string& threadId) const {
  checkId(assistantId, "assistant");
  Assistants& all = assistants();
  if (all.isProfile(assistantId) || options.models.empty()) {
    // A profile; with no served list, any other id may name one of workers elsewhere.
    if (auto made = all.created(assistantId)) {
      Assistants::applyVersion(made->current, submit, threadId);
    } else {
      submit.profile = profileOf(assistantId);
    }
    return;
  }
  auto made = all.created(assistantId);
  if (!made)
    throw apNotFound("no assistant '" + assistantId + "' (POST /assistants/search lists them)");
  Assistants::applyVersion(made->current, submit, threadId);
}

json AgentProtocol::Impl::assistantJson(const std::string& assistantId) const {
  checkId(assistantId, "assistant");
  if (assistants().isProfile(assistantId)) return profileJson(assistantId);
  if (auto made = assistants().created(assistantId)) return createdJson(*made);
  throw apNotFound("no assistant '" + assistantId + "'");
}

// Reads and checks an assistant's fields from a create or update body into `change` (those
// given).
void AgentProtocol::Impl::readAssistantFields(const json& in,
                                              detail::AssistantChange& change) const {
  if (in.contains("graph_id") && !in["graph_id"].is_null()) {
    if (!in["graph_id"].is_string()) throw apBadRequest("invalid_graph_id", "graph_id is a string");
    const std::string graph = in["graph_id"].get<std::string>();
    checkId(graph, "graph");
    if (!options.models.empty() && !assistants().isProfile(graph)) {
      throw apBadRequest("invalid_graph_id",
                         "graph_id '" + graph + "' is not a profile the workers serve (" +
                             "GET /v1/models lists them; \"agent\" is their default)");
    }
    change.graphId = graph;
  }
  if (in.contains("name") && !in["name"].is_null())
    change.name = cappedText(in["name"], "name", kMaxAssistantNameBytes, false);
  if (in.contains("description") && !in["description"].is_null()) {
    change.description =
        cappedText(in["description"], "description", kMaxAssistantDescriptionBytes, true);
  }
  for (const char* key : {"config", "context"}) {
    if (!in.contains(key) || in[key].is_null()) continue;
    const json& value = in[key];
    if (!value.is_object())
      throw apBadRequest("invalid_" + std::string(key), std::string(key) + " must be an object");
    if (value.dump().size() > kMaxAssistantSettingsBytes) {
      throw apBadRequest(
          "invalid_" + std::string(key),
          std::string(key) + " is over " + std::to_string(kMaxAssistantSettingsBytes) + " bytes");
    }
    (std::string(key) == "config" ? change.config : change.context) = value;
  }
  // What a run could not honour is refused now, not at the run.
  SubmitOptions probe;
  readRunSettings(change.config.value_or(json()), change.context.value_or(json()), probe, "");
  if (in.contains("metadata") && !in["metadata"].is_null()) {
    checkMetadata(in["metadata"], "metadata");
    change.metadata = in["metadata"];
  }
}

void AgentProtocol::Impl::createAssistant(const httplib::Request& req, httplib::Response& res) {
  const json in = body(req);
  const std::string ifExists = optionalString(in, "if_exists", "raise");
  if (ifExists != "raise" && ifExists != "do_nothing") {
    throw apBadRequest("invalid_if_exists", "if_exists is raise or do_nothing");
  }
  if (!in.contains("graph_id") || in["graph_id"].is_null()) {
    throw apBadRequest("invalid_graph_id",
                       "graph_id is required: the workers' profile (\"agent\": their default)");
  }
  std::string id = optionalString(in, "assistant_id", "");
  if (id.empty()) {
    id = detail::generateId("asst-");
  } else {
    checkId(id, "assistant");
  }
  detail::AssistantChange fields;
  readAssistantFields(in, fields);
  auto existing = [&]() -> json {
    if (ifExists == "raise") throw apConflict("assistant_exists", "assistant '" + id + "' exists");
    return assistantJson(id);
  };
  if (assistants().isProfile(id)) {
    sendApJson(res, 200, existing());
    return;
  }
  detail::AssistantVersion first;
  first.id = id;
  first.graphId = *fields.graphId;
  first.name = fields.name.value_or("Untitled");
  first.description = fields.description;
  if (fields.config) first.config = *fields.config;
  if (fields.context) first.context = *fields.context;
  if (fields.metadata) first.metadata = *fields.metadata;
  if (!assistantStore().create(first)) {
    sendApJson(res, 200, existing());
    return;
  }
  sendApJson(res, 200, assistantJson(id));
}

void AgentProtocol::Impl::getAssistant(const httplib::Request& req, httplib::Response& res) {
  sendApJson(res, 200, assistantJson(req.matches[1]));
}

// 404 for an unknown id, 409 for a profile's (read-only) assistant.
void AgentProtocol::Impl::mustCreatedAssistant(const std::string& id) const {
  checkId(id, "assistant");
  if (assistants().isProfile(id)) {
    throw apConflict("read_only_assistant",
                     "assistant '" + id +
                         "' is a profile of the workers (their configuration): it is read-only; "
                         "create an assistant with graph_id '" +
                         id + "' to change its settings");
  }
  if (!assistants().created(id)) throw apNotFound("no assistant '" + id + "'");
}

void AgentProtocol::Impl::updateAssistant(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  mustCreatedAssistant(id);
  const json in = body(req);
  detail::AssistantChange change;
  readAssistantFields(in, change);
  if (!change.config || !change.context) {
    // The settings that stay must still be readable with the new ones.
    auto current = assistants().created(id);
    if (current) {
      SubmitOptions probe;
      readRunSettings(change.config.value_or(current->current.config),
                      change.context.value_or(current->current.context), probe, "");
    }
  }
  auto updated = assistantStore().update(id, change);
  if (!updated) throw apNotFound("no assistant '" + id + "'");
  sendApJson(res, 200, createdJson(*updated));
}

void AgentProtocol::Impl::deleteAssistant(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  if (req.has_param("delete_threads") && req.get_param_value("delete_threads") == "true") {
    throw apBadRequest("unsupported",
                       "delete_threads is not supported: a parley thread does not belong to an "
                       "assistant (delete threads with DELETE /threads/{id})");
  }
  mustCreatedAssistant(id);
  if (!assistantStore().remove(id)) throw apNotFound("no assistant '" + id + "'");
  res.status = 204;
}

void AgentProtocol::Impl::assistantVersions(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  mustCreatedAssistant(id);
  const json in = body(req);
  const size_t limit = pageLimit(in.value("limit", json()), 10);
  const size_t offset = pageOffset(in.value("offset", json()));
  const json filter = in.value("metadata", json());
  checkMetadata(filter, "metadata");
  json out = json::array();
  size_t skipped = 0;
  for (const auto& v : assistantStore().versions(id)) {
    if (!metadataMatches(v.metadata, filter)) continue;
    if (skipped++ < offset) continue;
    if (out.size() >= limit) break;
    out.push_back(versionJson(v));
  }
  sendApJson(res, 200, out);
}

void AgentProtocol::Impl::setLatestAssistant(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  mustCreatedAssistant(id);
  const json in = body(req);
  if (!in.contains("version") || !in["version"].is_number_integer()) {
    throw apBadRequest("invalid_version", "version is required (an integer)");
  }
  const int64_t version = in["version"].get<int64_t>();
  auto set = assistantStore().setLatest(id, version);
  if (!set) {
    throw apNotFound("no version " + std::to_string(version) + " of assistant '" + id +
                     "' (POST /assistants/" + id + "/versions lists them)");
  }
  sendApJson(res, 200, createdJson(*set));
}

void AgentProtocol::Impl::searchAssistants(const httplib::Request& req, httplib::Response& res,
                                           bool count) {
  const json in = body(req);
  const size_t limit = count ? 0 : pageLimit(in.value("limit", json()), 10);
  const size_t offset = count ? 0 : pageOffset(in.value("offset", json()));
  const std::string graph = optionalString(in, "graph_id", "");
  const std::string name = lowered(optionalString(in, "name", ""));
  const json filter = in.value("metadata", json());
  checkMetadata(filter, "metadata");
  const std::string sortBy = optionalString(in, "sort_by", "created_at");
  const std::string sortOrder = optionalString(in, "sort_order", "desc");
  static const std::vector<std::string> kSortable = {"assistant_id", "graph_id", "name",
                                                     "created_at", "updated_at"};
  if (std::find(kSortable.begin(), kSortable.end(), sortBy) == kSortable.end()) {
    throw apBadRequest("invalid_sort_by",
                       "sort_by is assistant_id, graph_id, name, created_at or updated_at");
  }
  if (sortOrder != "asc" && sortOrder != "desc") {
    throw apBadRequest("invalid_sort_order", "sort_order is asc or desc");
  }
  json fields = in.value("select", json());
  if (!fields.is_null() && !fields.is_array())
    throw apBadRequest("invalid_select", "select is a list of fields");

  // The profiles' assistants and the created ones (at most kMaxAssistantsListed of those).
  std::vector<json> found;
  for (const auto& id : assistants().profileIds())
    found.push_back(profileJson(id));
  if (auto* store = assistants().store()) {
    for (const auto& a : store->list(kMaxAssistantsListed))
      if (!assistants().isProfile(a.current.id)) found.push_back(createdJson(a));
  }
  std::erase_if(found, [&](const json& a) {
    if (!graph.empty() && a["graph_id"] != graph) return true;
    if (!name.empty() && lowered(a["name"].get<std::string>()).find(name) == std::string::npos)
      return true;
    return !metadataMatches(a["metadata"], filter);
  });
  if (count) {
    sendApJson(res, 200, found.size());
    return;
  }
  // ISO times of one format sort as text.
  std::stable_sort(found.begin(), found.end(), [&](const json& a, const json& b) {
    const std::string x =
        a[sortBy].get<std::string>() + '\x01' + a["assistant_id"].get<std::string>();
    const std::string y =
        b[sortBy].get<std::string>() + '\x01' + b["assistant_id"].get<std::string>();
    return sortOrder == "asc" ? x < y : y < x;
  });
  json out = json::array();
  for (size_t i = offset; i < found.size() && out.size() < limit; ++i) {
    if (fields.is_null() || fields.empty()) {
      out.push_back(found[i]);
      continue;
    }
    json picked = json::object();
    for (const auto& field : fields) {
      if (!field.is_string() || !found[i].contains(field.get<std::string>())) {
        throw apBadRequest("invalid_select", "select names fields of an assistant");
      }
      picked[field.get<std::string>()] = found[i][field.get<std::string>()];
    }
    out.push_back(std::move(picked));
  }
  if (offset + out.size() < found.size()) {
    res.set_header("X-Pagination-Next", std::to_string(offset + out.size()));
  }
  sendApJson(res, 200, out);
}

}  // namespace parley::service
