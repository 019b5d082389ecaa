// Runs: submit on a thread (the typed reader of run_request.hpp), list a thread's runs, read,
// cancel and answer one (docs/service.md).
#include "parley/run_request.hpp"
#include "parley/telemetry.hpp"
#include "service/routes.hpp"

namespace parley::service {

using json = nlohmann::json;

namespace {

json runView(const RunInfo& run) {
  json out = toJson(run);
  out["object"] = "run";
  return out;
}

class RunRoutes {
 public:
  explicit RunRoutes(ServiceState& state) : s_(state) {}

  void submit(const httplib::Request& req, httplib::Response& res) {
    const std::string threadId = req.matches[1];
    s_.checkId(threadId, "thread");
    RunRequest request = readRunRequest(jsonBody(req));
    // The worker that claims the run continues this request's trace (docs/telemetry.md).
    if (const TraceContext trace = currentTraceContext(); trace.valid()) {
      request.options.traceparent = trace.traceparent();
      request.options.tracestate = trace.traceState;
    }
    if (!request.options.id.empty()) {
      s_.checkId(request.options.id, "run");
      if (s_.runs->run(request.options.id)) {
        throw conflict("run_exists", "run '" + request.options.id + "' exists");
      }
    }
    RunInfo run = s_.runs->submit(threadId, request.input, request.options);
    if (run.status == RunStatus::Rejected) {
      json out = errorBody(run.error, "conflict_error", "run_rejected");
      out["run"] = toJson(run);
      sendJson(res, 409, out);
      return;
    }
    sendJson(res, 202, runView(run));
  }

  void listOfThread(const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    s_.mustThread(id);
    RunListOptions list;
    list.threadId = id;
    list.limit = std::min<size_t>(s_.options.maxPage, s_.runs->options().limits.maxPage);
    json data = json::array();
    for (const auto& run : s_.runs->listRuns(list))
      data.push_back(toJson(run));
    sendJson(res, 200, {{"object", "list"}, {"data", data}});
  }

  void get(const httplib::Request& req, httplib::Response& res) {
    RunInfo run = s_.mustRun(req.matches[1]);
    json out = runView(run);
    json input = json::array();
    for (const Message& m : run.input)
      input.push_back(toJson(m));
    out["input"] = input;
    sendJson(res, 200, out);
  }

  void cancel(const httplib::Request& req, httplib::Response& res) {
    const RunInfo run = s_.mustRun(req.matches[1]);
    sendJson(res, 200, runView(s_.runs->cancel(run.id)));
  }

  void respond(const httplib::Request& req, httplib::Response& res) {
    const RunInfo run = s_.mustRun(req.matches[1]);
    json in = jsonBody(req);
    if (!in.contains("response")) throw badRequest("invalid_response", "response is required");
    if (run.status != RunStatus::Waiting || !run.response.is_null()) {
      throw conflict("run_not_waiting", "run '" + run.id + "' is " +
                                            std::string(toString(run.status)) +
                                            (run.response.is_null() ? "" : " and answered") +
                                            ", not waiting for an answer");
    }
    sendJson(res, 200, runView(s_.runs->respond(run.id, in["response"])));
  }

 private:
  ServiceState& s_;
};

}  // namespace

void installRunRoutes(http::Server& server, ServiceState& state) {
  auto routes = std::make_shared<RunRoutes>(state);
  const Logger& log = state.options.log;
  const std::string ofThread = "/v1/threads/" + kIdSegment + "/runs";
  const std::string one = "/v1/runs/" + kIdSegment;
  server.Post(ofThread, handle(log, [routes](auto& q, auto& r) { routes->submit(q, r); }));
  server.Get(ofThread, handle(log, [routes](auto& q, auto& r) { routes->listOfThread(q, r); }));
  server.Get(one, handle(log, [routes](auto& q, auto& r) { routes->get(q, r); }));
  server.Post(one + "/cancel", handle(log, [routes](auto& q, auto& r) { routes->cancel(q, r); }));
  server.Post(one + "/respond", handle(log, [routes](auto& q, auto& r) { routes->respond(q, r); }));
}

}  // namespace parley::service
