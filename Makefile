# Fjord: the two commands that matter are `make serve` and `make test`.
.PHONY: all bootstrap build build-debug python serve cluster check test unit integration bench fuzz fuzz-smoke crash-test sim-long sim-mutants test-sanitize clean

JOBS ?= 2
BUILD_RELEASE := build/release
BUILD_DEBUG := build/debug

all: build

bootstrap:
	@scripts/bootstrap.sh

$(BUILD_RELEASE)/build.ninja: CMakeLists.txt CMakePresets.json
	cmake --preset release >/dev/null

build: bootstrap $(BUILD_RELEASE)/build.ninja
	scripts/check_boundary.sh
	scripts/check_style.sh
	scripts/check_doc_paths.py
	cmake --build --preset release -j $(JOBS)

build-debug: bootstrap
	cmake --preset debug >/dev/null
	cmake --build --preset debug -j $(JOBS)

# The Python package (python/): pip-installed into a fresh venv, build/venv-sdk (scripts/python_sdk.sh);
# the KV connectors' venv with the real LMCache and vLLM packages, build/venv-connectors.
python: bootstrap
	scripts/python_sdk.sh
	scripts/connectors_venv.sh

# Starts a single-node server: data in ./data, listening on 127.0.0.1:9000.
serve: build
	@if [ -z "$$FJORD_ACCESS_KEY" ]; then echo "make serve: development credentials: access key 'fjordadmin', secret key 'fjordadmin-secret' (set FJORD_ACCESS_KEY and FJORD_SECRET_KEY to choose your own)"; fi
	$(BUILD_RELEASE)/fjord serve

# A local cluster to try: etcd and 4 node processes on loopback (docs/cluster.md); Ctrl-C stops it.
cluster: build
	scripts/cluster.sh 4

# The development loop (CONTRIBUTING.md): gates, an incremental build and every ctest test (unit tests and
# the simulations on a few hundred seeds), under five minutes after the first build; prints its time.
check: bootstrap $(BUILD_RELEASE)/build.ninja
	scripts/check.sh $(JOBS)

unit: bootstrap $(BUILD_RELEASE)/build.ninja
	cmake --build --preset release -j $(JOBS)
	ctest --preset unit -j $(JOBS)

PYTHON_TESTS := tests/integration/test_python_sdk.py tests/integration/test_python_torch.py tests/integration/test_python_kv.py

integration: build python
	.venv/bin/python -m pytest -q tests/integration
	.venv-torch/bin/python -m pytest -q tests/integration/test_s3torchconnector.py
	build/venv-sdk/bin/python -m pytest -q $(PYTHON_TESTS)
	build/venv-connectors/bin/python -m pytest -q tests/integration/test_connectors.py tests/integration/test_nixl.py

test: build python
	cd $(BUILD_RELEASE) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) fuzz-smoke
	.venv/bin/python -m pytest -q -p no:cacheprovider tests/integration
	.venv-torch/bin/python -m pytest -q -p no:cacheprovider tests/integration/test_s3torchconnector.py
	build/venv-sdk/bin/python -m pytest -q -p no:cacheprovider $(PYTHON_TESTS)
	build/venv-connectors/bin/python -m pytest -q -p no:cacheprovider tests/integration/test_connectors.py tests/integration/test_nixl.py
	.venv/bin/python tests/crash/crash_test.py --cycles 5 --max-put-bytes 1048576 --max-parts 2
	.venv/bin/python tests/crash/versioned_crash_test.py --cycles 5

# libFuzzer targets (tests/fuzz), one after another, FUZZ_SECONDS each; see docs/reliability.md.
FUZZ_SECONDS ?= 600
fuzz: bootstrap
	scripts/fuzz.sh $(FUZZ_SECONDS)

fuzz-smoke: bootstrap
	scripts/fuzz.sh 10

# SIGKILL under concurrent load, restart, check every key; see docs/reliability.md ("Crash test").
CRASH_CYCLES ?= 50
crash-test: build
	.venv/bin/python tests/crash/crash_test.py --cycles $(CRASH_CYCLES)
	.venv/bin/python tests/crash/versioned_crash_test.py --cycles $(CRASH_CYCLES)

# The deterministic simulations over many seeds, JOBS processes each (make test runs a few hundred of
# each through ctest): server_sim (HTTP, S3 and engine together on simulated connections, clock and
# cores), engine_sim (the engine through crashes) and cluster_sim (CLUSTER_SIM_SEEDS seeds of a cluster
# with faults and healing); see docs/reliability.md ("Simulation"). A failure prints its seed:
# build/release/tests/sim/server_sim --seed N
SIM_SEEDS ?= 100000
SIM_FIRST_SEED ?= 1
CLUSTER_SIM_SEEDS ?= 2000
sim-long: build
	scripts/sim_long.sh $(SIM_SEEDS) $(SIM_FIRST_SEED) $(JOBS) $(CLUSTER_SIM_SEEDS)

# Puts back, one at a time, bugs from the project's history (tests/sim/mutants) and shows that
# server_sim finds each within SIM_MUTANT_SEEDS seeds.
SIM_MUTANT_SEEDS ?= 1000
sim-mutants: build
	scripts/sim_mutants.sh $(SIM_MUTANT_SEEDS)

# The unit tests and the integration suite against an ASan + UBSan build of everything (docs/reliability.md).
test-sanitize: build-debug
	cd $(BUILD_DEBUG) && ctest --output-on-failure -j $(JOBS)
	FJORD_BINARY=$(BUILD_DEBUG)/fjord ASAN_OPTIONS=detect_leaks=0 .venv/bin/python -m pytest -q -p no:cacheprovider -m "not big" tests/integration
	cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
	    -DCMAKE_C_COMPILER=clang-14 -DFJORD_SANITIZE=thread >/dev/null
	cmake --build build/tsan -j $(JOBS) --target io_test store_test
	TSAN_OPTIONS=halt_on_error=1 build/tsan/tests/unit/io_test
	TSAN_OPTIONS=halt_on_error=1 build/tsan/tests/unit/store_test

bench: build
	bench/run.sh

clean:
	rm -rf build
