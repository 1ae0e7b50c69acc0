#include "worker/client.hpp"

#include "client/address.hpp"
#include "protocol/shard_hash.hpp"

namespace fusee::worker {

std::string call_answer::code() const {
  if (body.is_object())
    if (auto it = body.find("code"); it != body.end() && it->is_string()) return *it;
  return std::string{proto::call_status_code(status)};
}

std::string call_answer::error() const {
  if (ok()) return {};
  if (body.is_object())
    if (auto it = body.find("error"); it != body.end() && it->is_string()) return *it;
  return body.dump();
}

proto::result<workflow_client> workflow_client::connect(const std::string& server,
                                                        const std::string& name,
                                                        const client::security& sec) {
  auto at = client::parse_host_port(server);
  if (!at)
    return proto::error{proto::err_code::io, "server address " + server + " is not host:port"};
  auto c = client::connection::open(at->host, at->port, sec);
  if (!c) return c.err();
  workflow_client wc;
  wc.conn_ = std::move(*c);
  auto count = client::client_hello(wc.conn_, name, std::chrono::seconds(10));
  if (!count) return count.err();
  wc.shard_count_ = *count;
  return wc;
}

proto::result<uint64_t> workflow_client::send_call(const std::string& id, const std::string& method,
                                                   const std::string& type, const json& args,
                                                   uint32_t park_ms) {
  auto text = args.dump();
  uint64_t rid = next_id_++;
  if (!conn_.send(proto::call{
          proto::request_head{rid, proto::shard_for(id, shard_count_), proto::epoch_t{0}}, method,
          type, proto::bytes(text.begin(), text.end()), park_ms}))
    return proto::error{proto::err_code::io, "connection to the server lost"};
  return rid;
}

proto::result<workflow_client::numbered_answer>
workflow_client::next_answer(std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::max(std::chrono::milliseconds(0),
                         std::chrono::duration_cast<std::chrono::milliseconds>(
                             until - std::chrono::steady_clock::now()));
    auto r = conn_.receive(left);
    if (!r) return r.err();
    if (auto* e = std::get_if<proto::err>(&*r)) {
      numbered_answer n;
      n.request = e->id;
      n.refused = proto::error{static_cast<proto::err_code>(e->code), e->message};
      return n;
    }
    auto* res = std::get_if<proto::call_result>(&*r);
    if (!res) continue;
    numbered_answer n;
    n.request = res->id;
    n.answer.status = static_cast<proto::call_status>(res->status);
    n.answer.body = json::parse(res->body.begin(), res->body.end(), nullptr, false);
    if (n.answer.body.is_discarded())
      n.answer.body = json{{"error", std::string(res->body.begin(), res->body.end())}};
    return n;
  }
}

proto::result<call_answer> workflow_client::call(const std::string& id, const std::string& method,
                                                 const std::string& type, const json& args,
                                                 uint32_t park_ms,
                                                 std::chrono::milliseconds extra_wait) {
  auto rid = send_call(id, method, type, args, park_ms);
  if (!rid) return rid.err();
  auto limit = std::chrono::milliseconds(park_ms ? park_ms : 30000) + extra_wait;
  for (;;) {
    auto r = next_answer(limit);
    if (!r) return r.err();
    if (r->refused && (r->request == *rid || r->request == 0)) return *r->refused;
    if (r->request == *rid) return r->answer;
  }
}

proto::result<call_answer> workflow_client::start(const std::string& type, const std::string& id,
                                                  const json& input, uint32_t park_ms) {
  return call(id, "start", type, json{{"id", id}, {"type", type}, {"input", input}}, park_ms);
}

proto::result<call_answer> workflow_client::signal(const std::string& id, const std::string& name,
                                                   const json& payload, uint32_t park_ms,
                                                   const std::string& key) {
  json args{{"id", id}, {"name", name}, {"payload", payload}};
  if (!key.empty()) args["key"] = key;
  return call(id, "signal", "", args, park_ms);
}

proto::result<call_answer> workflow_client::result(const std::string& id, uint64_t wait_ms,
                                                   uint32_t park_ms) {
  // A worker that leaves (an invoked one) answers with the run's state at that moment: the wait
  // goes on with the next holder until it is over.
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    auto r = call(id, "result", "", json{{"id", id}, {"wait_ms", wait_ms}}, park_ms,
                  std::chrono::milliseconds(wait_ms) + std::chrono::seconds(60));
    auto now = std::chrono::steady_clock::now();
    if (!r || !r->ok() || r->body.value("status", "") != "running" || wait_ms == 0 ||
        now + std::chrono::milliseconds(50) >= until)
      return r;
    wait_ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count());
  }
}

proto::result<call_answer> workflow_client::describe(const std::string& id, uint32_t park_ms) {
  return call(id, "describe", "", json{{"id", id}}, park_ms);
}

proto::result<call_answer> workflow_client::cancel(const std::string& id, uint32_t park_ms) {
  return call(id, "cancel", "", json{{"id", id}}, park_ms);
}

}  // namespace fusee::worker
