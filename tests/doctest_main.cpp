// The doctest main of both test programs (unit_tests, integration_tests). CTest runs each test case
// by name (--test-case=NAME); a name that matches nothing (CMake splits names at ';', for one)
// would otherwise pass with zero test cases run, so a filtered run that ran none fails. With
// FUSEE_TEST_DENY_EPOLL_PWAIT2 set, the process runs as on a kernel without epoll_pwait2.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

namespace {

/// Makes epoll_pwait2 fail with ENOSYS on this thread and every thread it starts from now on (call
/// it before any), as on a kernel before 5.11: the I/O threads' fallback runs for real. False if
/// the kernel refused.
bool deny_epoll_pwait2() {
  sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_epoll_pwait2, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]), code};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return false;
  errno = 0;
  return ::syscall(__NR_epoll_pwait2, -1, nullptr, 0, nullptr, nullptr, 0) == -1 && errno == ENOSYS;
}

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
  if (std::getenv("FUSEE_TEST_DENY_EPOLL_PWAIT2") && !deny_epoll_pwait2()) {
    std::fprintf(stderr, "FUSEE_TEST_DENY_EPOLL_PWAIT2: could not make epoll_pwait2 fail (%s)\n",
                 std::strerror(errno));
    return 1;
  }
  doctest::Context context(argc, argv);
  int rc = context.run();
  if (context.shouldExit()) return rc;
  bool filtered = false;
  for (int i = 1; i < argc; ++i)
    for (auto* flag :
         {"--test-case=", "-test-case=", "--dt-test-case=", "-tc=", "--tc=", "--dt-tc=",
          "--source-file=", "-source-file=", "--dt-source-file=", "-sf=", "--sf=", "--dt-sf="})
      filtered = filtered || std::strncmp(argv[i], flag, std::strlen(flag)) == 0;
  if (rc == 0 && filtered && started == 0) {
    std::fprintf(stderr, "no test case matched the --test-case or --source-file filter: a name "
                         "CTest split or mangled? (';' in a test name)\n");
    return 1;
  }
  return rc;
}
