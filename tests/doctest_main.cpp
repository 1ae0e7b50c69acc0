// The doctest main of both test programs (unit_tests, integration_tests). CTest runs each test case
// by name
// (--test-case=NAME); a name that matches nothing (CMake splits names at ';', for one) would
// otherwise pass with zero test cases run, so a filtered run that ran none fails.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <csignal>
#include <cstdio>
#include <cstring>

namespace {

int started = 0;

struct counter : doctest::IReporter {
  explicit counter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { ++started; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

DOCTEST_REGISTER_LISTENER("fusee-counter", 1, counter);

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // TLS clients write with write(): a reset peer is EPIPE
  doctest::Context context(argc, argv);
  int rc = context.run();
  if (context.shouldExit()) return rc;
  bool filtered = false;
  for (int i = 1; i < argc; ++i)
    for (auto* flag :
         {"--test-case=", "-test-case=", "--dt-test-case=", "-tc=", "--tc=", "--dt-tc="})
      filtered = filtered || std::strncmp(argv[i], flag, std::strlen(flag)) == 0;
  if (rc == 0 && filtered && started == 0) {
    std::fprintf(stderr, "no test case matched the --test-case filter: a name CTest split or "
                         "mangled? (';' in a test name)\n");
    return 1;
  }
  return rc;
}
