#include "app/admin_routes.hpp"

#include "protocol/json_text.hpp"

namespace fusee::app {

namespace {

http_reply json(unsigned status, std::string body) {
  return http_reply{status, "application/json", std::move(body)};
}

/// /v1/invoker: the scheduler's and endpoints' metrics with the original's camelCase keys.
http_reply invoker_metrics(caf::actor_system& sys, const server::directory_actor& directory,
                           const server::scheduler_actor& scheduler) {
  caf::scoped_actor self{sys};
  uint64_t parked = 0;
  self->request(directory, std::chrono::seconds(5), server::parked_atom::value)
      .receive([&](uint64_t n) { parked = n; }, [&](caf::error&) {});
  if (!scheduler)
    return json(200, R"({"endpoints":[],"dueShards":0,"invokingShards":0,"backoffShards":0,)"
                     R"("handbacks":0,"crashes":0,"noProgress":0,"parkedCalls":)" +
                         std::to_string(parked) + "}");
  std::string body;
  self->request(scheduler, std::chrono::seconds(5), server::metrics_atom::value, parked)
      .receive([&](std::string& j) { body = std::move(j); }, [&](caf::error&) {});
  if (body.empty()) return json(503, R"({"error":"the invoker did not answer"})");
  return json(200, std::move(body));
}

}  // namespace

http_server::handler admin_routes(caf::actor_system& sys, server::directory_actor directory,
                                  server::scheduler_actor scheduler) {
  return [&sys, directory, scheduler](const http_exchange& ex) {
    if (ex.method == "GET" && ex.path == "/healthz") return json(200, R"({"status":"ok"})");
    if (ex.method == "GET" && ex.path == "/v1/invoker")
      return invoker_metrics(sys, directory, scheduler);
    return json(404, proto::json_error("no such admin endpoint: " + ex.method + " " + ex.path));
  };
}

}  // namespace fusee::app
