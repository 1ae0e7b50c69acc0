#include "app/call.hpp"

#include <cstdio>

#include "app/config.hpp"
#include "client/connection.hpp"
#include "protocol/shard_hash.hpp"

namespace fusee::app {

int run_call(const std::string& server, int64_t shard, const std::string& workflow,
             const std::string& method, const std::string& args, const std::string& type,
             uint32_t park_ms, const client::security& sec) {
  auto at = parse_host_port(server);
  if (!at) {
    std::fprintf(stderr, "fusee call: --server %s is not host:port\n", server.c_str());
    return 2;
  }
  if ((shard < 0) == workflow.empty()) {
    std::fprintf(stderr, "fusee call: give exactly one of --shard and --workflow\n");
    return 2;
  }
  auto c = client::connection::open(at->host, at->port, sec);
  if (!c) {
    std::fprintf(stderr, "fusee call: %s\n", c.err().message.c_str());
    return 2;
  }
  auto count = client::client_hello(*c, "fusee-call", std::chrono::seconds(10));
  if (!count) {
    std::fprintf(stderr, "fusee call: the server did not accept the client: %s\n",
                 count.err().message.c_str());
    return 2;
  }
  auto target = workflow.empty() ? proto::shard_id{static_cast<uint32_t>(shard)}
                                 : proto::shard_for(workflow, *count);
  c->send(proto::call{proto::request_head{2, target, proto::epoch_t{0}}, method, type,
                      proto::bytes(args.begin(), args.end()), park_ms});
  // The server answers within its parking limit; allow for a slow holder on top.
  auto r =
      c->receive(std::chrono::milliseconds(park_ms ? park_ms : 30000) + std::chrono::seconds(60));
  auto* res = r ? std::get_if<proto::call_result>(&*r) : nullptr;
  if (!res) {
    std::fprintf(stderr, "fusee call: no answer: %s\n",
                 r ? "unexpected frame" : r.err().to_string().c_str());
    return 2;
  }
  std::fwrite(res->body.data(), 1, res->body.size(), stdout);
  std::fputc('\n', stdout);
  return res->status == 0 ? 0 : res->status == 1 ? 1 : 2;
}

}  // namespace fusee::app
