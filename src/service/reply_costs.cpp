#include "service/reply_costs.hpp"

#include <memory>

#include "parley/cost.hpp"
#include "parley/json.hpp"
#include "parley/usage.hpp"
#include "service/run_follower.hpp"

namespace parley::service {

using json = nlohmann::json;

void installReplyCostRoutes(httplib::Server& server, ServiceState& state) {
  auto prices = state.options.prices;
  server.Post(
      "/v1/costs",
      openAiRoute(state.options.log, [prices](const httplib::Request& req, httplib::Response& res) {
        // {"replies": [{"model", "usage"}]} -> {"costs": [{"usd", "text"}]}, in order; an
        // unpriced model's usd is null.
        const json in = parseJson(req.body, {}, false);
        if (in.is_discarded() || !in.is_object() || !in.contains("replies") ||
            !in["replies"].is_array() || in["replies"].size() > kMaxPricedReplies) {
          throw OpenAiError(400, "invalid_request_error", "invalid_replies",
                            "the body must be {\"replies\": [{\"model\", \"usage\"}]}, at most " +
                                std::to_string(kMaxPricedReplies),
                            "replies");
        }
        json costs = json::array();
        for (const json& reply : in["replies"]) {
          std::optional<double> usd;
          const auto usage =
              reply.is_object() ? usageFromJson(reply.value("usage", json())) : std::nullopt;
          const std::string model =
              reply.is_object() && reply.contains("model") && reply["model"].is_string()
                  ? reply["model"].get<std::string>()
                  : "";
          if (prices && usage && !model.empty()) usd = prices->cost(model, *usage);
          costs.push_back({{"usd", usd ? json(*usd) : json()}, {"text", formatUsd(usd)}});
        }
        sendJson(res, 200, {{"costs", costs}});
      }));
}

}  // namespace parley::service
