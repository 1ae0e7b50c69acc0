# Fusee: the two commands are `make run` and `make test`. Everything else is for developers.
# Each target installs missing Debian packages first (scripts/install-deps.sh, as root).

# Where this Makefile is: make can run from another directory (the tutorial test does).
SRC           := $(dir $(realpath $(lastword $(MAKEFILE_LIST))))
JOBS          ?= 2
BUILD_DIR     ?= build
ASAN_DIR      ?= build-asan
FUZZ_DIR      ?= build-fuzz
FUZZ_SECONDS  ?= 30
CMAKE_FLAGS   ?=

.PHONY: all deps build test test-asan fuzz run cluster bench format format-check clean

all: build

deps:
	@bash $(SRC)scripts/install-deps.sh

build: deps
	cmake -S $(SRC) -B $(BUILD_DIR) -DFUSEE_WERROR=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD_DIR) -j$(JOBS)

test: build
	ctest --test-dir $(BUILD_DIR) -j$(JOBS) --output-on-failure

# The whole suite under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan: deps
	cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=Debug -DFUSEE_WERROR=ON \
	  -DFUSEE_SANITIZE=address,undefined $(CMAKE_FLAGS)
	cmake --build $(ASAN_DIR) -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(ASAN_DIR) -j$(JOBS) --output-on-failure

# libFuzzer over every decoder (tests/fuzz: frames and bodies, invocation JSON and signature
# headers, the workflow journal, the log's on-disk parsers, the TOML config, the HTTP API's
# routes), FUZZ_SECONDS each, from the corpora kept in tests/fuzz/corpus (new inputs go to
# $(FUZZ_DIR)/corpus-<target>; `-merge=1` them into tests/fuzz/corpus to keep them).
FUZZ_TARGETS ?= protocol journal wal config api
fuzz: deps
	cmake -S . -B $(FUZZ_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFUSEE_FUZZ=ON \
	  -DCMAKE_CXX_COMPILER=clang++ -DFUSEE_SANITIZE=address,undefined
	cmake --build $(FUZZ_DIR) -j$(JOBS)
	rm -rf $(FUZZ_DIR)/seeds && mkdir -p $(FUZZ_DIR)/seeds
	$(FUZZ_DIR)/tests/fuzz/fuzz_seeds $(FUZZ_DIR)/seeds
	for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_DIR)/corpus-$$t && \
	  extra=$$( [ $$t = protocol ] && echo $(FUZZ_DIR)/seeds ); \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(FUZZ_DIR)/tests/fuzz/$${t}_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	    -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/$$t- \
	    $(FUZZ_DIR)/corpus-$$t tests/fuzz/corpus/$$t $$extra || exit 1; \
	done

# Starts the server on ./data with the defaults of docs/operations.md, the HTTP API on :7402 and
# an invocation endpoint at 127.0.0.1:9000 (scripts/run-local.sh; Ctrl-C stops it).
run: build
	@bash $(SRC)scripts/run-local.sh $(BUILD_DIR) $(RUN_ARGS)

# Three cluster nodes on loopback (deploy/cluster/: node-a/b/c.toml, data and logs there; Ctrl-C
# stops them).
cluster: build
	@bash $(SRC)deploy/cluster/start.sh $(realpath $(BUILD_DIR))/app/fusee

# The load scenarios of bench/scenarios/ at full length (`fusee load`); SCENARIO=steady runs one.
bench: build
	@bash $(SRC)bench/load.sh $(BUILD_DIR) $(SCENARIO)

format:
	find protocol tests app actors bench worker client load tls logging -name '*.cpp' -o -name '*.hpp' | xargs -r clang-format -i

format-check:
	find protocol tests app actors bench worker client load tls logging -name '*.cpp' -o -name '*.hpp' | \
	  xargs -r clang-format --dry-run --Werror

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(FUZZ_DIR)
