// Writing JSON text: one string escaper for every JSON the project writes (invocation bodies,
// call errors, metrics, handler answers).
#pragma once

#include <string>
#include <string_view>

namespace fusee::proto {

/// Appends `s` as a JSON string literal, quotes included (", \ and control characters escaped;
/// bytes that are not valid UTF-8 written as \ufffd, so the text is always valid JSON).
void append_json_string(std::string& out, std::string_view s);

/// `s` as a JSON string literal.
std::string json_quote(std::string_view s);

/// {"error":"<message>"}, the body of CALL_RESULT statuses 2-4 and of handler refusals.
std::string json_error(std::string_view message);

/// {"error":"<message>","code":"<code>"}: an HTTP error a program can tell apart by `code`.
std::string json_error(std::string_view message, std::string_view code);

}  // namespace fusee::proto
