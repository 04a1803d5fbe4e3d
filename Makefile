# The two commands of the quick start. Each installs what is missing, configures and builds.
BUILD ?= build
JOBS ?= $(shell nproc)
DEMO_OUT ?= runs/demo-$(shell date +%Y%m%d-%H%M%S)

.PHONY: all deps build demo test clean

all: build

deps:
	@tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

demo: build
	$(BUILD)/bin/mtrun -np 4 configs/tiny.cfg --out $(DEMO_OUT)

test: build
	cd $(BUILD) && ctest --output-on-failure -j1

clean:
	rm -rf $(BUILD)
