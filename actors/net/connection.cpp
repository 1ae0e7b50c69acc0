#include "actors/net/connection.hpp"

#include <unistd.h>

namespace fusee::server {

connection::connection(int fd, uint64_t write_limit, uint32_t max_frame, int spare)
    : frame_limit(max_frame), fd_(fd), lane_(std::make_shared<out_lane>(fd, write_limit, spare)),
      decoder_(max_frame) {
  last_rx_ns.store(now_ns(), std::memory_order_relaxed);
}

connection::~connection() {
  if (!removed_ && fd_ >= 0) ::close(fd_);
}

}  // namespace fusee::server
