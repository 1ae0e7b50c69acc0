#include "protocol/cluster_map.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <utility>

#include <openssl/sha.h>

#include "protocol/hex.hpp"

namespace fusee::proto {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

std::optional<uint32_t> number(std::string_view s) {
  s = trim(s);
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string text_of(shard_range r) {
  return r.first == r.last ? std::to_string(r.first)
                           : std::to_string(r.first) + "-" + std::to_string(r.last);
}

/// "shard 3 belongs" / "shards 3-5 belong"
std::string shards_belong(shard_range r) {
  return r.first == r.last ? "shard " + text_of(r) + " belongs"
                           : "shards " + text_of(r) + " belong";
}

struct owned {
  shard_range range;
  size_t node;
};

std::vector<owned> sorted_ranges(const cluster_map& map) {
  std::vector<owned> all;
  for (size_t n = 0; n < map.nodes.size(); ++n)
    for (auto r : map.nodes[n].shards)
      all.push_back({r, n});
  std::sort(all.begin(), all.end(),
            [](const owned& a, const owned& b) { return a.range.first < b.range.first; });
  return all;
}

/// `ranges` sorted by first shard, overlapping and adjacent ones merged.
std::vector<shard_range> merged(std::vector<shard_range> ranges) {
  std::sort(ranges.begin(), ranges.end(), [](auto a, auto b) { return a.first < b.first; });
  std::vector<shard_range> out;
  for (auto r : ranges)
    if (!out.empty() && uint64_t{out.back().last} + 1 >= r.first)
      out.back().last = std::max(out.back().last, r.last);
    else
      out.push_back(r);
  return out;
}

/// The ranges of the node named `name` in `map`, merged; none if the map does not name it.
std::vector<shard_range> ranges_of(const cluster_map& map, const std::string& name) {
  for (auto& n : map.nodes)
    if (n.name == name) return merged(n.shards);
  return {};
}

}  // namespace

result<std::vector<shard_range>> parse_shard_ranges(std::string_view text) {
  std::vector<shard_range> out;
  if (trim(text).empty()) return error{err_code::bad_body, "no shards given"};
  while (true) {
    auto comma = text.find(',');
    auto part = trim(text.substr(0, comma));
    auto dash = part.find('-');
    auto first = number(part.substr(0, dash));
    auto last = dash == std::string_view::npos ? first : number(part.substr(dash + 1));
    if (!first || !last)
      return error{err_code::bad_body,
                   "\"" + std::string(part) + "\" is not a shard or a range of shards (A-B)"};
    if (*first > *last)
      return error{err_code::bad_body, "the range \"" + std::string(part) + "\" runs backwards"};
    out.push_back({*first, *last});
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

std::string format_shard_ranges(const std::vector<shard_range>& ranges) {
  std::string out;
  for (auto r : ranges)
    out += (out.empty() ? "" : ", ") + text_of(r);
  return out;
}

std::optional<size_t> cluster_map::owner_of(uint32_t shard) const {
  for (size_t n = 0; n < nodes.size(); ++n)
    for (auto r : nodes[n].shards)
      if (shard >= r.first && shard <= r.last) return n;
  return std::nullopt;
}

std::string cluster_map::canonical() const {
  std::vector<const cluster_node*> by_name;
  for (auto& n : nodes)
    by_name.push_back(&n);
  std::sort(by_name.begin(), by_name.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::string out;
  for (auto* n : by_name) {
    // Sorted and adjacent ranges merged: "0-7, 8-15" and "0-15" are the same map.
    out += n->name + " cluster=" + n->cluster + " listen=" + n->listen + " http=" + n->http +
           " shards=" + format_shard_ranges(merged(n->shards)) + "\n";
  }
  return out;
}

std::string cluster_map::digest() const {
  auto text = canonical();
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), md);
  return to_hex(md, sizeof(md));
}

result<cluster_map> parse_canonical(std::string_view text) {
  cluster_map map;
  size_t line_no = 0;
  while (!text.empty()) {
    auto end = text.find('\n');
    auto line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ++line_no;
    auto bad = [&](const std::string& why) {
      return error{err_code::bad_body, "line " + std::to_string(line_no) + " of the map (\"" +
                                           std::string(line) + "\"): " + why};
    };
    // "name cluster=A listen=B http=C shards=R": no field holds a space but the last.
    cluster_node n;
    auto space = line.find(' ');
    n.name = std::string(line.substr(0, space));
    if (n.name.empty() || space == std::string_view::npos) return bad("no node name and fields");
    auto rest = line.substr(space + 1);
    std::pair<const char*, std::string*> fields[] = {
        {"cluster=", &n.cluster}, {"listen=", &n.listen}, {"http=", &n.http}};
    for (auto [key, to] : fields) {
      if (rest.substr(0, std::strlen(key)) != key) return bad(std::string("no ") + key);
      rest.remove_prefix(std::strlen(key));
      auto sp = rest.find(' ');
      if (sp == std::string_view::npos) return bad("it ends early");
      *to = std::string(rest.substr(0, sp));
      rest.remove_prefix(sp + 1);
    }
    if (rest.substr(0, 7) != "shards=") return bad("no shards=");
    auto shards = parse_shard_ranges(rest.substr(7));
    if (!shards) return bad(shards.err().message);
    n.shards = std::move(*shards);
    map.nodes.push_back(std::move(n));
  }
  return map;
}

std::vector<shard_range> contested_shards(const cluster_map& ours, const std::string& self,
                                          const cluster_map& theirs) {
  auto own = ranges_of(ours, self);
  auto kept = ranges_of(theirs, self);  // what their map also gives `self`
  std::vector<shard_range> out;
  size_t k = 0;
  for (auto r : own) {
    uint64_t from = r.first;  // the first shard of r not yet placed
    while (k < kept.size() && kept[k].last < from)
      ++k;
    for (size_t j = k; j < kept.size() && kept[j].first <= r.last && from <= r.last; ++j) {
      if (kept[j].first > from) out.push_back({static_cast<uint32_t>(from), kept[j].first - 1});
      from = std::max<uint64_t>(from, uint64_t{kept[j].last} + 1);
    }
    if (from <= r.last) out.push_back({static_cast<uint32_t>(from), r.last});
  }
  return out;
}

std::optional<std::string> check_cluster_map(const cluster_map& map, uint32_t shard_count) {
  if (shard_count == 0) return "a cluster map needs at least one shard";
  if (map.nodes.empty()) return "the cluster map has no node ([[cluster.nodes]])";
  for (size_t i = 0; i < map.nodes.size(); ++i) {
    auto& n = map.nodes[i];
    if (n.name.empty()) return "node #" + std::to_string(i + 1) + " of the cluster map has no name";
    // Names and addresses make up the digest's text: no character that could fake a field.
    for (auto* field : {&n.name, &n.cluster, &n.listen, &n.http})
      for (char c : *field)
        if (!std::isalnum(static_cast<unsigned char>(c)) && !std::strchr("._-:[]", c))
          return "node \"" + n.name + "\": \"" + *field +
                 "\" may hold only letters, digits and . _ - : [ ]";
    for (size_t j = 0; j < i; ++j)
      if (map.nodes[j].name == n.name) return "the cluster map names node \"" + n.name + "\" twice";
    if (n.shards.empty()) return "node \"" + n.name + "\" owns no shards";
    for (auto r : n.shards)
      if (r.last >= shard_count)
        return "node \"" + n.name + "\" owns shards " + text_of(r) + ", but there are only " +
               std::to_string(shard_count) + " (0-" + std::to_string(shard_count - 1) + ")";
  }
  // Walk the ranges in order: each must start right after the previous one ended.
  auto all = sorted_ranges(map);
  uint64_t next = 0;  // the first shard not yet owned
  const owned* prev = nullptr;
  for (auto& o : all) {
    if (o.range.first > next)
      return shards_belong({static_cast<uint32_t>(next), o.range.first - 1}) + " to no node";
    if (o.range.first < next) {
      uint32_t overlap_last = std::min<uint64_t>(o.range.last, next - 1);
      if (prev->node == o.node)
        return "node \"" + map.nodes[o.node].name + "\" lists " +
               (o.range.first == overlap_last ? "shard " : "shards ") +
               text_of({o.range.first, overlap_last}) + " twice (" + text_of(prev->range) +
               " and " + text_of(o.range) + ")";
      return shards_belong({o.range.first, overlap_last}) + " to both \"" +
             map.nodes[prev->node].name + "\" (" + text_of(prev->range) + ") and \"" +
             map.nodes[o.node].name + "\" (" + text_of(o.range) + ")";
    }
    next = uint64_t{o.range.last} + 1;
    prev = &o;
  }
  if (next < shard_count)
    return shards_belong({static_cast<uint32_t>(next), shard_count - 1}) + " to no node";
  return std::nullopt;
}

}  // namespace fusee::proto
