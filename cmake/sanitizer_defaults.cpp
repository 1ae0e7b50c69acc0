// Linked into every binary of a FUSEE_SANITIZE build: UBSan's defaults, so that `ctest`, the
// server and the tools all apply cmake/ubsan.supp however they are started.

extern "C" const char* __ubsan_default_options() {
  return "print_stacktrace=1:suppressions=" FUSEE_UBSAN_SUPPRESSIONS;
}
