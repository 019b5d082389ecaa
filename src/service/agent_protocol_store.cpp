// The store of the LangGraph API (docs/service.md): namespaced JSON items with a time to live,
// kept in the service's database (src/store/item_store.hpp) on SQLite and PostgreSQL alike.
#include "parley/errors.hpp"
#include "parley/iso_time.hpp"
#include "service/agent_protocol_impl.hpp"
#include "store/item_store.hpp"

namespace parley::service {

using json = nlohmann::json;

namespace {

std::vector<std::string> labels(const json& value, const std::string& field) {
  if (value.is_null()) return {};
  if (!value.is_array()) throw apBadRequest("invalid_namespace", field + " is a list of labels");
  if (value.size() > detail::kMaxNamespaceDepth) {
    throw apBadRequest(
        "invalid_namespace",
        field + " is deeper than " + std::to_string(detail::kMaxNamespaceDepth) + " labels");
  }
  std::vector<std::string> out;
  for (const auto& label : value) {
    if (!label.is_string()) throw apBadRequest("invalid_namespace", field + ": labels are strings");
    out.push_back(label.get<std::string>());
  }
  return out;
}

json itemJson(const detail::StoredItem& item) {
  return {{"namespace", item.ns},
          {"key", item.key},
          {"value", item.value},
          {"created_at", isoTime(item.createdAt)},
          {"updated_at", isoTime(item.updatedAt)}};
}

bool truthy(const json& value) {
  return value.is_boolean() ? value.get<bool>() : false;
}

}  // namespace

detail::ItemStore& AgentProtocol::Impl::items() {
  std::call_once(itemsMade,
                 [this] { itemStore = std::make_unique<detail::ItemStore>(runs.threads()); });
  return *itemStore;
}

void AgentProtocol::Impl::storePut(const httplib::Request& req, httplib::Response& res) {
  const json in = body(req);
  const auto ns = labels(in.value("namespace", json()), "namespace");
  const std::string key = optionalString(in, "key", "");
  if (in.contains("index") && !in["index"].is_null() && in["index"] != false) {
    throw apBadRequest("unsupported",
                       "index: parley keeps no search index of items (no embeddings); items are "
                       "found by namespace and filtered by value");
  }
  std::optional<double> ttl;
  if (in.contains("ttl") && !in["ttl"].is_null()) {
    if (!in["ttl"].is_number()) throw apBadRequest("invalid_ttl", "ttl is a number of minutes");
    ttl = in["ttl"].get<double>();
  }
  items().put(ns, key, in.value("value", json()), ttl);
  res.status = 204;
}

void AgentProtocol::Impl::storeGet(const httplib::Request& req, httplib::Response& res) {
  const std::string text = req.get_param_value("namespace");
  std::vector<std::string> ns;
  for (size_t at = 0; !text.empty();) {
    const size_t dot = text.find('.', at);
    ns.push_back(text.substr(at, dot - at));
    if (dot == std::string::npos || ns.size() > detail::kMaxNamespaceDepth) break;
    at = dot + 1;
  }
  const std::string refresh = req.get_param_value("refresh_ttl");
  auto item = items().get(ns, req.get_param_value("key"), refresh == "true" || refresh == "1");
  if (!item)
    throw apNotFound("no item '" + req.get_param_value("key").substr(0, 256) + "' in '" +
                     text.substr(0, 256) + "'");
  sendApJson(res, 200, itemJson(*item));
}

void AgentProtocol::Impl::storeDelete(const httplib::Request& req, httplib::Response& res) {
  const json in = body(req);
  items().remove(labels(in.value("namespace", json()), "namespace"), optionalString(in, "key", ""));
  res.status = 204;
}

void AgentProtocol::Impl::storeSearch(const httplib::Request& req, httplib::Response& res) {
  const json in = body(req);
  if (in.contains("query") && !in["query"].is_null()) {
    throw apBadRequest("unsupported",
                       "query: parley keeps no search index of items (no embeddings); filter "
                       "by value with `filter`");
  }
  const json filter = in.value("filter", json());
  checkMetadata(filter, "filter");
  auto found = items().search(labels(in.value("namespace_prefix", json()), "namespace_prefix"),
                              filter, pageLimit(in.value("limit", json()), 10),
                              pageOffset(in.value("offset", json())),
                              truthy(in.value("refresh_ttl", json())));
  json out = json::array();
  for (const auto& item : found)
    out.push_back(itemJson(item));
  sendApJson(res, 200, {{"items", out}});
}

void AgentProtocol::Impl::storeNamespaces(const httplib::Request& req, httplib::Response& res) {
  const json in = body(req);
  size_t depth = 0;
  if (in.contains("max_depth") && !in["max_depth"].is_null()) {
    if (!in["max_depth"].is_number_integer() || in["max_depth"].get<int64_t>() < 1 ||
        in["max_depth"].get<int64_t>() > static_cast<int64_t>(detail::kMaxNamespaceDepth)) {
      throw apBadRequest("invalid_max_depth",
                         "max_depth is 1 to " + std::to_string(detail::kMaxNamespaceDepth));
    }
    depth = static_cast<size_t>(in["max_depth"].get<int64_t>());
  }
  auto found = items().namespaces(
      labels(in.value("prefix", json()), "prefix"), labels(in.value("suffix", json()), "suffix"),
      depth, pageLimit(in.value("limit", json()), 100), pageOffset(in.value("offset", json())));
  sendApJson(res, 200, {{"namespaces", found}});
}

}  // namespace parley::service
