#include "app/api_routes.hpp"

#include <charconv>
#include <vector>

#include <simdjson.h>

#include "app/url_decoding.hpp"
#include "protocol/json_text.hpp"
#include "protocol/wire.hpp"
#include "protocol/workflow_name.hpp"

namespace fusee::app {

namespace {

/// An error answered at once; its `code` follows from the status (docs/operations.md).
api_route refuse(unsigned status, const std::string& message) {
  const char* code = status == 400   ? "bad_request"
                     : status == 404 ? "no_route"
                     : status == 503 ? "out_of_memory"
                                     : "bad_method";
  return api_route{std::nullopt, api_refusal{status, proto::json_error(message, code), {}}};
}

/// A query argument the route does not take, named with the ones it does.
std::optional<std::string> unknown_argument(const http_exchange& ex, std::string_view takes) {
  if (!ex.repeated_query.empty())
    return "query argument '" + ex.repeated_query + "' is given twice";
  for (auto& [key, value] : ex.query)
    if (key != takes)
      return "unknown query argument '" + key + "' for " + ex.method + " " + ex.path +
             (takes.empty() ? std::string{" (it takes none)"}
                            : " (it takes " + std::string{takes} + ")");
  return std::nullopt;
}

/// The body as JSON text: empty means null; anything else must be one valid JSON value. A
/// refusal's status: 400, or 503 when the server ran out of memory parsing it.
std::optional<std::string> json_body(const std::string& body, std::string* err, unsigned* status) {
  *status = 400;
  size_t start = body.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return std::string{"null"};
  simdjson::dom::parser parser;
  simdjson::padded_string padded(body);
  auto doc = parser.parse(padded);
  if (doc.error() == simdjson::MEMALLOC) {  // the server's trouble, not the body's
    *status = 503;
    *err = "the server is out of memory to parse the body; try again later";
    return std::nullopt;
  }
  if (doc.error()) {
    *err = std::string{"the body is not JSON: "} + simdjson::error_message(doc.error());
    return std::nullopt;
  }
  return body.substr(start);
}

}  // namespace

std::string result_args(const std::string& id, uint64_t wait_ms) {
  return "{\"id\":" + proto::json_quote(id) + ",\"wait_ms\":" + std::to_string(wait_ms) + "}";
}

api_route route_api_request(const http_exchange& ex) {
  auto seg = path_segments(ex.raw_path);  // a %2F stays inside its id
  if (seg.size() < 3 || seg[0] != "v1" || seg[1] != "workflows")
    return refuse(404, "no route " + ex.method + " " + ex.path +
                           "; routes: POST /v1/workflows/{type}/{id}, GET /v1/workflows/{id}, "
                           "GET /v1/workflows/{id}/describe, "
                           "POST /v1/workflows/{id}/signals/{name}, "
                           "POST /v1/workflows/{id}/cancel");
  api_request r;
  std::string err;
  auto check = [&](const char* what, const std::string& v) {
    if (auto bad = proto::bad_workflow_name(what, v)) {
      err = *bad;
      return false;
    }
    return true;
  };
  const std::string& id = seg[2];
  if (ex.method == "GET" && (seg.size() == 3 || (seg.size() == 4 && seg[3] == "describe"))) {
    if (!check("workflow id", id)) return refuse(400, err);
    r.workflow = id;
    r.method = seg.size() == 3 ? "result" : "describe";
    if (auto bad = unknown_argument(ex, r.method == "result" ? "wait_ms" : ""))
      return refuse(400, *bad);
    if (auto w = ex.query.find("wait_ms"); w != ex.query.end()) {
      uint64_t v = 0;
      auto [p, ec] = std::from_chars(w->second.data(), w->second.data() + w->second.size(), v);
      if (ec != std::errc{} || p != w->second.data() + w->second.size() || v > 600000)
        return refuse(400, "wait_ms must be an integer from 0 to 600000, not '" + w->second + "'");
      r.wait_ms = v;
    }
    r.args = r.method == "result" ? result_args(id, r.wait_ms)
                                  : "{\"id\":" + proto::json_quote(id) + "}";
    return api_route{r, std::nullopt};
  }
  if (ex.method == "GET") return refuse(404, "no route GET " + ex.path);
  if (ex.method != "POST") {
    auto r =
        refuse(405, ex.method + " " + ex.path + ": use GET to read a workflow, POST to change it");
    r.refusal->allow = "GET, POST";
    return r;
  }
  if (seg.size() == 4 && seg[3] == "cancel") {
    if (auto bad = unknown_argument(ex, "")) return refuse(400, *bad);
    if (!check("workflow id", id)) return refuse(400, err);
    // Empty, or {"reason": "..."}: anything else is more likely a start of a workflow whose id
    // is `cancel` (with its input) than a cancel of the workflow whose id is the type.
    std::string reason;
    if (ex.body.find_first_not_of(" \t\r\n") != std::string::npos) {
      simdjson::dom::parser parser;
      simdjson::padded_string padded(ex.body);
      simdjson::dom::object fields;
      std::string_view text;
      bool ok = parser.parse(padded).get(fields) == simdjson::SUCCESS;
      if (ok)
        for (auto field : fields)
          ok = ok && field.key == "reason" && field.value.get(text) == simdjson::SUCCESS;
      if (!ok)
        return refuse(400, "the body of POST " + ex.path +
                               " is empty or {\"reason\": \"...\"} (it cancels workflow '" + id +
                               "'; a workflow whose id is `cancel` is started with `fusee start`, "
                               "not over HTTP)");
      reason = std::string{text};
    }
    r.method = "cancel";
    r.workflow = id;
    r.args = "{\"id\":" + proto::json_quote(id) +
             (reason.empty() ? "" : ",\"reason\":" + proto::json_quote(reason)) + "}";
    return api_route{r, std::nullopt};
  }
  if (seg.size() == 5 && seg[3] == "signals") {
    if (auto bad = unknown_argument(ex, "")) return refuse(400, *bad);
    if (!check("workflow id", id) || !check("signal name", seg[4])) return refuse(400, err);
    // An Idempotency-Key header: a retry with the same key delivers nothing again.
    std::string key;
    if (auto k = ex.headers.find("idempotency-key"); k != ex.headers.end()) {
      if (ex.repeated_headers.count(k->first))
        return refuse(400, "the Idempotency-Key header is given twice");
      if (!check("the Idempotency-Key header", k->second)) return refuse(400, err);
      key = ",\"key\":" + proto::json_quote(k->second);
    }
    unsigned status = 400;
    auto payload = json_body(ex.body, &err, &status);
    if (!payload) return refuse(status, err);
    r.method = "signal";
    r.workflow = id;
    r.args = "{\"id\":" + proto::json_quote(id) + ",\"name\":" + proto::json_quote(seg[4]) +
             ",\"payload\":" + *payload + key + "}";
    return api_route{r, std::nullopt};
  }
  if (seg.size() == 4) {  // POST /v1/workflows/{type}/{id}
    if (auto bad = unknown_argument(ex, "")) return refuse(400, *bad);
    const std::string& type = seg[2];
    const std::string& wid = seg[3];
    if (!check("workflow type", type) || !check("workflow id", wid)) return refuse(400, err);
    unsigned status = 400;
    auto input = json_body(ex.body, &err, &status);
    if (!input) return refuse(status, err);
    r.method = "start";
    r.workflow = wid;
    r.type = type;
    r.args = "{\"id\":" + proto::json_quote(wid) + ",\"type\":" + proto::json_quote(type) +
             ",\"input\":" + *input + "}";
    return api_route{r, std::nullopt};
  }
  return refuse(404, "no route POST " + ex.path);
}

}  // namespace fusee::app
