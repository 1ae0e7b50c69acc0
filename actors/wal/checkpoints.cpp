#include "actors/wal/checkpoints.hpp"

namespace fusee::server::wal {

fs::path checkpoint_store::path(uint32_t shard) const {
  return dir_ / ("shard-" + std::to_string(shard) + ".ckpt");
}

proto::result<void> checkpoint_store::write(uint32_t shard, uint64_t lsn, byte_view data) const {
  return write_file_durably(path(shard),
                            encode(checkpoint_file{lsn, bytes(data.begin(), data.end())}));
}

proto::result<std::optional<checkpoint_file>> checkpoint_store::read(uint32_t shard) const {
  auto p = path(shard);
  std::error_code ec;
  if (!fs::exists(p, ec)) return std::optional<checkpoint_file>{};
  auto all = read_file(p);
  if (!all) return all.err();
  auto c = decode_checkpoint(*all);
  if (!c) return proto::error{proto::err_code::io, p.string() + ": " + c.err().message};
  return std::optional<checkpoint_file>{std::move(*c)};
}

}  // namespace fusee::server::wal
