#include "protocol/errors.hpp"

namespace fusee::proto {

std::string_view name(err_code code) {
  switch (code) {
  case err_code::bad_frame:
    return "BAD_FRAME";
  case err_code::unknown_kind:
    return "UNKNOWN_KIND";
  case err_code::bad_body:
    return "BAD_BODY";
  case err_code::stale_epoch:
    return "STALE_EPOCH";
  case err_code::not_holder:
    return "NOT_HOLDER";
  case err_code::lsn_gap:
    return "LSN_GAP";
  case err_code::unknown_invocation:
    return "UNKNOWN_INVOCATION";
  case err_code::invocation_taken:
    return "INVOCATION_TAKEN";
  case err_code::version:
    return "VERSION";
  case err_code::too_large:
    return "TOO_LARGE";
  case err_code::io:
    return "IO";
  case err_code::shutting_down:
    return "SHUTTING_DOWN";
  case err_code::unauthorized:
    return "UNAUTHORIZED";
  case err_code::bad_offer:
    return "BAD_OFFER";
  }
  return "UNKNOWN";
}

std::string error::to_string() const {
  std::string out{name(code)};
  if (!message.empty()) {
    out += ": ";
    out += message;
  }
  return out;
}

}  // namespace fusee::proto
