// Writes a seed corpus for protocol_fuzz: every sample message as a stream and as a bare body,
// a valid invocation body and a valid signature header.
#include <fstream>
#include <string>

#include "protocol/invocation_request.hpp"
#include "protocol/signature.hpp"
#include "samples.hpp"

using namespace fusee::proto;

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::string dir = argv[1];
  int n = 0;
  auto write = [&](uint8_t mode, const bytes& payload) {
    std::ofstream f(dir + "/seed-" + std::to_string(n++), std::ios::binary);
    f.put(static_cast<char>(mode));
    f.write(reinterpret_cast<const char*>(payload.data()),
            static_cast<std::streamsize>(payload.size()));
  };
  bytes stream;
  for (const auto& m : fusee::test::sample_messages()) {
    auto frame = encode(m);
    write(0, frame);
    write(4 * 7, frame);
    stream.insert(stream.end(), frame.begin(), frame.end());
    bytes body{static_cast<uint8_t>(kind_of(m))};
    encode_body(m, body);
    write(2, body);
  }
  write(1, stream);
  invocation_request r{1,     invocation_id{0x00f3a1c2b4d5e6f7}, {shard_id{3}, shard_id{9}},
                       60000, reason_call | reason_timer,        "127.0.0.1:7400"};
  auto json = to_json(r);
  write(7, bytes(json.begin(), json.end()));
  auto sig = sign("k", 1764489600000, "body");
  write(3, bytes(sig.begin(), sig.end()));
  return 0;
}
