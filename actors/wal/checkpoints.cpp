#include "actors/wal/checkpoints.hpp"

#include <algorithm>
#include <charconv>
#include <string_view>

namespace fusee::server::wal {

namespace {
// A checkpoint's file name: prefix, the shard in decimal, suffix.
constexpr std::string_view prefix = "shard-", suffix = ".ckpt";
}  // namespace

fs::path checkpoint_store::path(uint32_t shard) const {
  return dir_ / (std::string{prefix} + std::to_string(shard) + std::string{suffix});
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

proto::result<std::vector<uint32_t>> checkpoint_store::stored(uint32_t shards) const {
  std::vector<uint32_t> out;
  std::error_code ec;
  if (!fs::exists(dir_, ec)) return out;
  for (auto it = fs::directory_iterator(dir_, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    auto name = it->path().filename().string();
    if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
        !name.ends_with(suffix))
      continue;
    uint32_t shard = 0;
    auto digits =
        std::string_view(name).substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), shard);
    if (err != std::errc{} || end != digits.data() + digits.size() || shard >= shards ||
        name != path(shard).filename().string())
      continue;
    out.push_back(shard);
  }
  if (ec)
    return proto::error{proto::err_code::io, "cannot list " + dir_.string() + ": " + ec.message()};
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace fusee::server::wal
