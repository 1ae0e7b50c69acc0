// CRC32C (Castagnoli, reflected 0x82F63B78, init and xorout 0xFFFFFFFF), as frames and the WAL use
// it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fusee::proto {

/// Continues a CRC: crc32c(b, crc32c(a)) == crc32c(a ++ b); start with crc = 0.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

/// The portable table-driven implementation (for tests; crc32c() picks the fastest).
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);

/// True if crc32c() uses the CPU's SSE4.2 crc32 instruction.
bool crc32c_hardware();

}  // namespace fusee::proto
