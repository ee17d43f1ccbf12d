# Fjord: the two commands that matter are `make serve` and `make test`.
.PHONY: all bootstrap build build-debug serve test unit integration bench crash-test clean

JOBS ?= 2
BUILD_RELEASE := build/release
BUILD_DEBUG := build/debug

all: build

bootstrap:
	@scripts/bootstrap.sh

$(BUILD_RELEASE)/build.ninja: CMakeLists.txt CMakePresets.json
	cmake --preset release >/dev/null

build: bootstrap $(BUILD_RELEASE)/build.ninja
	cmake --build --preset release -j $(JOBS)

build-debug: bootstrap
	cmake --preset debug >/dev/null
	cmake --build --preset debug -j $(JOBS)

# Starts a single-node server: data in ./data, listening on 127.0.0.1:9000.
serve: build
	$(BUILD_RELEASE)/fjord serve

unit: build
	cd $(BUILD_RELEASE) && ctest --output-on-failure -j $(JOBS)

integration: build
	.venv/bin/python -m pytest -q tests/integration

test: build
	cd $(BUILD_RELEASE) && ctest --output-on-failure -j $(JOBS)
	.venv/bin/python -m pytest -q -p no:cacheprovider tests/integration
	.venv/bin/python tests/crash/crash_test.py --cycles 5 --max-put-bytes 1048576 --max-parts 2

# SIGKILL under concurrent load, restart, check every key; see docs/reliability.md ("Crash test").
CRASH_CYCLES ?= 50
crash-test: build
	.venv/bin/python tests/crash/crash_test.py --cycles $(CRASH_CYCLES)

bench: build
	bench/run.sh

clean:
	rm -rf build
