#include "actors/wal/section_index.hpp"

#include <algorithm>
#include <ranges>
#include <utility>

namespace fusee::server::wal {

section_index::section_index(section_index&& o) noexcept
    : chunks_(std::exchange(o.chunks_, {})), size_(std::exchange(o.size_, 0)),
      head_(std::exchange(o.head_, 0)), capacity_(std::exchange(o.capacity_, 0)) {}

section_index& section_index::operator=(section_index&& o) noexcept {
  if (this != &o) {
    chunks_ = std::exchange(o.chunks_, {});
    size_ = std::exchange(o.size_, 0);
    head_ = std::exchange(o.head_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
  }
  return *this;
}

void section_index::push_back(const section_ref& r) {
  size_t end = head_ + size_;  // the slot after the last entry, counted from chunks_[0]'s start
  if (chunks_.empty()) {
    chunks_.push_back(std::make_unique<section_ref[]>(1));
    capacity_ = 1;
  } else if (chunks_.size() == 1 && end == capacity_ && capacity_ < chunk_size) {
    // The lone first chunk doubles (at most chunk_size / 2 entries copied, a few KiB).
    auto cap = std::min<size_t>(size_t{capacity_} * 2, chunk_size);
    auto grown = std::make_unique<section_ref[]>(cap);
    std::copy(&chunks_[0][head_], &chunks_[0][end], grown.get());
    chunks_[0] = std::move(grown);
    capacity_ = static_cast<uint32_t>(cap);
    head_ = 0;
    end = size_;
  } else if (end % chunk_size == 0 && end / chunk_size == chunks_.size()) {
    chunks_.push_back(std::make_unique<section_ref[]>(chunk_size));  // nothing stored moves
    capacity_ = chunk_size;
  }
  chunks_[end / chunk_size][end % chunk_size] = r;
  ++size_;
}

size_t section_index::first_not(const std::function<bool(const section_ref&)>& pred) const {
  auto positions = std::views::iota(size_t{0}, size_);
  return *std::ranges::partition_point(positions, [&](size_t i) { return pred((*this)[i]); });
}

size_t section_index::find(uint64_t lsn) const {
  // The first section starting after `lsn`; the one before it holds `lsn`.
  size_t after = first_not([&](const section_ref& x) { return x.first_lsn <= lsn; });
  return after == 0 ? size_ : after - 1;
}

void section_index::drop_through(uint64_t segment) {
  // Sections are in segment order: the first one to keep.
  size_t lo = first_not([&](const section_ref& x) { return x.segment <= segment; });
  if (lo == 0) return;
  if (lo == size_) {
    *this = section_index{};  // the memory goes back too
    return;
  }
  size_ -= lo;
  size_t head = head_ + lo;
  size_t whole = head / chunk_size;  // chunks whose every entry is dropped
  chunks_.erase(chunks_.begin(), chunks_.begin() + static_cast<ptrdiff_t>(whole));
  head_ = static_cast<uint32_t>(head - whole * chunk_size);
}

}  // namespace fusee::server::wal
