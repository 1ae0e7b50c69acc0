# Finds the C++ Actor Framework. Debian's libcaf-dev 0.17.6 ships neither a CMake package nor a
# pkg-config file. Creates CAF::core, CAF::io and CAF::openssl, the target names of upstream
# CAF >= 0.18, so a later switch keeps the target_link_libraries lines.
#   find_package(CAF 0.17 REQUIRED COMPONENTS core io)
find_path(CAF_INCLUDE_DIR NAMES caf/config.hpp)
if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE ".*CAF_VERSION ([0-9]+).*" "\\1" _caf_version "${_caf_version_line}")
  math(EXPR _caf_major "${_caf_version} / 10000")
  math(EXPR _caf_minor "(${_caf_version} / 100) % 100")
  math(EXPR _caf_patch "${_caf_version} % 100")
  set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
endif()

if(NOT CAF_FIND_COMPONENTS)
  set(CAF_FIND_COMPONENTS core io)
endif()

find_package(Threads REQUIRED)
foreach(_comp IN LISTS CAF_FIND_COMPONENTS)
  find_library(CAF_${_comp}_LIBRARY NAMES caf_${_comp})
  if(CAF_${_comp}_LIBRARY AND CAF_INCLUDE_DIR)
    set(CAF_${_comp}_FOUND TRUE)
    if(NOT TARGET CAF::${_comp})
      add_library(CAF::${_comp} SHARED IMPORTED)
      set_target_properties(CAF::${_comp} PROPERTIES
        IMPORTED_LOCATION "${CAF_${_comp}_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}")
      if(_comp STREQUAL "core")
        target_link_libraries(CAF::core INTERFACE Threads::Threads)
      else()
        target_link_libraries(CAF::${_comp} INTERFACE CAF::core)
      endif()
    endif()
  endif()
endforeach()

if(TARGET CAF::openssl)
  find_package(OpenSSL REQUIRED)
  target_link_libraries(CAF::openssl INTERFACE CAF::io OpenSSL::SSL)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR
  VERSION_VAR CAF_VERSION
  HANDLE_COMPONENTS)
mark_as_advanced(CAF_INCLUDE_DIR CAF_core_LIBRARY CAF_io_LIBRARY CAF_openssl_LIBRARY)
