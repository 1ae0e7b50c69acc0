// The log's on-disk format, version 1: every structure as a struct with one description of its
// fields (format.cpp) that drives both writing and reading, as protocol/messages.cpp does for
// frames. No I/O here.
//
//   <data_dir>/fusee.meta               text: "format=1\nshards=N\n"
//   <data_dir>/fusee.newest             text: "segment=N\n" (N: 20 digits), the newest segment
//                                       made, written (durably) once it is in place: recovery
//                                       refuses a log whose newest segment is missing (absent:
//                                       not checked)
//   <data_dir>/wal/seg-<16 hex>.wal     segment = header batch*, then zeros (preallocated)
//     header  = "FWAL" version:u32 seq:u64
//     batch   = "FWB1" len:u32 seq:u64 prev_crc:u32 crc:u32 body[len]
//               crc = CRC32C(len ++ seq ++ prev_crc ++ body); prev_crc chains each batch to the
//               one before (across segments), seq counts batches
//     body    = (tag:u8 section)*
//       1 records  = shard:u32 epoch:u64 first_lsn:u64 count:u32 (len:u32 bytes)*
//       2 grant    = shard:u32 epoch:u64
//       3 snapshot = count:u32 (shard:u32 epoch:u64 last_lsn:u64)*   every shard with state; the
//                    first batch of every segment, so a segment never depends on older ones
//       4 reserve  = epoch:u64   no shard has an epoch above this granted until a higher reserve
//                    is durable; after a restart every shard's grants start above the highest
//                    one (so a grant within it needs no fdatasync of its own). Also in the first
//                    batch of every segment, after the snapshot
//       5 extent   = bytes:u64   the segment file's size when it was made (header and preallocated
//                    zeros); last in the first batch of every segment (segments written before
//                    it have none). A crash never shortens a file: one shorter than this was
//                    cut short (recovery.hpp)
//   <data_dir>/checkpoints/shard-N.ckpt "FCK1" lsn:u64 len:u32 crc:u32 data[len], crc =
//   CRC32C(data)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "protocol/result.hpp"
#include "protocol/wire.hpp"

namespace fusee::server::wal {

using proto::byte_view;
using proto::bytes;

inline constexpr uint32_t format_version = 1;
inline constexpr std::string_view segment_magic = "FWAL";
inline constexpr std::string_view batch_magic = "FWB1";
inline constexpr std::string_view checkpoint_magic = "FCK1";
/// Encoded sizes of the fixed headers (format_test checks them against the descriptions).
inline constexpr size_t segment_header_size = 16;
inline constexpr size_t batch_header_size = 24;
/// A batch's body length is a u32: a longer body cannot be written (segment_set::write refuses it).
inline constexpr uint64_t max_batch_body = UINT32_MAX;

struct segment_header {
  uint32_t version = format_version;
  uint64_t seq = 0;
};

struct batch_header {
  uint32_t len = 0;  ///< of the body
  uint64_t seq = 0;
  uint32_t prev_crc = 0;
  uint32_t crc = 0;
};

/// Records of one shard. Decoded, `records` view the body they were read from, and `region` is
/// the `(len bytes)*` part (what the index points at, and what reads parse again).
struct records_section {
  uint32_t shard = 0;
  uint64_t epoch = 0;
  uint64_t first_lsn = 0;
  std::vector<byte_view> records;
  byte_view region;
};

struct grant_section {
  uint32_t shard = 0;
  uint64_t epoch = 0;
};

struct snapshot_entry {
  uint32_t shard = 0;
  uint64_t epoch = 0;
  uint64_t last_lsn = 0;
};

struct snapshot_section {
  std::vector<snapshot_entry> shards;
};

struct reserve_section {
  uint64_t epoch = 0;
};

struct extent_section {
  uint64_t bytes = 0;
};

/// A batch body's sections; the tag on disk is the index + 1.
using section =
    std::variant<records_section, grant_section, snapshot_section, reserve_section, extent_section>;

struct checkpoint_file {
  uint64_t lsn = 0;
  bytes data;
};

struct meta_file {
  uint32_t format = format_version;
  uint32_t shards = 0;
};

struct newest_file {
  uint64_t segment = 0;
};

// -- writing ---------------------------------------------------------------------------------

bytes encode(const segment_header& h);
/// Header and body of one batch, the CRC computed.
bytes encode_batch(uint64_t seq, uint32_t prev_crc, byte_view body);
/// The same into `out` (replacing what it held; its capacity is reused).
void encode_batch_into(bytes& out, uint64_t seq, uint32_t prev_crc, byte_view body);

/// A buffer the log's committer keeps from batch to batch for its capacity (the body, the encoded
/// batch, the section lists, the report's lists, the queue and the batches' entries) is let go
/// once a batch made it larger than this: a burst does not pin its size for good.
inline constexpr size_t kept_buffer_limit = size_t{4} << 20;
template <class V>
void release_if_large(V& v) {
  if (v.capacity() * sizeof(typename V::value_type) > kept_buffer_limit) V{}.swap(v);
}
/// Appends the section (tag included) to a batch body; returns the offset of a records
/// section's region within `body` (0 for other sections).
size_t append_section(bytes& body, const records_section& s);
size_t append_section(bytes& body, const grant_section& s);
size_t append_section(bytes& body, const snapshot_section& s);
size_t append_section(bytes& body, const reserve_section& s);
size_t append_section(bytes& body, const extent_section& s);
size_t append_section(bytes& body, const section& s);
bytes encode(const checkpoint_file& c);
std::string encode(const meta_file& m);
std::string encode(const newest_file& n);

// -- reading (errors name the structure and field; callers add the file and offset) ---------

proto::result<segment_header> decode_segment_header(byte_view in);
/// The header at the start of `in` (which holds at least batch_header_size bytes).
proto::result<batch_header> decode_batch_header(byte_view in);
/// True if `body` is the body `h` announces (length and CRC).
bool batch_checksum_ok(const batch_header& h, byte_view body);
/// Every section of a checksummed batch body, in order.
proto::result<std::vector<section>> decode_sections(byte_view body);
/// The records of a records section's region (`count` of them).
proto::result<std::vector<byte_view>> decode_records(byte_view region, uint32_t count);
proto::result<checkpoint_file> decode_checkpoint(byte_view in);
proto::result<meta_file> decode_meta(std::string_view text);
proto::result<newest_file> decode_newest(std::string_view text);

/// "seg-<16 lowercase hex>.wal" for `seq`, and back (nothing if `name` is not one).
std::string segment_name(uint64_t seq);
std::optional<uint64_t> parse_segment_name(std::string_view name);

}  // namespace fusee::server::wal
