// The dashboard's files (app/dashboard/), compiled into the binary at build time by CMake
// (app/dashboard_assets.cpp.in): the admin server serves them with no file on disk.
#pragma once

#include <string_view>

namespace fusee::app {

std::string_view dashboard_html();
std::string_view dashboard_js();
std::string_view dashboard_css();

}  // namespace fusee::app
