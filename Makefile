# Set-up, demo and tests. `make demo` and `make test` each set up what they need first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# A pinned CPU build of PyTorch; a machine that already has torch in the venv keeps its own.
TORCH_SPEC ?= torch==2.13.0
DEMO := build/demo

.PHONY: setup runtime registry-tools demo test test-sanitized fuzz-tools fuzz coverage clean gpu-check

setup: $(VENV)/.installed runtime

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[test,cuda,models,registry]"
	touch $@

# The C++ runtime: libaotpack.so and aotpack-run, installed into the venv beside the Python package.
runtime: $(VENV)/.installed
	cmake -S runtime_cpp -B build/runtime -DCMAKE_BUILD_TYPE=Release > /dev/null
	cmake --build build/runtime -j2
	mkdir -p $(VENV)/lib
	install -m 755 build/runtime/aotpack-run $(BIN)/aotpack-run
	install -m 644 build/runtime/libaotpack.so $(VENV)/lib/libaotpack.so

# Export the MLP example with a dynamic batch, run it with the C++ runtime alone, compare with eager.
demo: setup
	mkdir -p $(DEMO)
	$(BIN)/aotpack export examples/mlp/model.py --dynamic batch=1..64 -o $(DEMO)/mlp.aotpack
	$(BIN)/aotpack inspect $(DEMO)/mlp.aotpack
	$(BIN)/python examples/compare.py inputs examples/mlp/model.py $(DEMO)/in.safetensors input=5,32
	$(BIN)/aotpack-run $(DEMO)/mlp.aotpack --inputs $(DEMO)/in.safetensors --outputs $(DEMO)/out.safetensors --device cpu
	$(BIN)/python examples/compare.py check examples/mlp/model.py $(DEMO)/in.safetensors $(DEMO)/out.safetensors

# The OCI registry server and client that tests/registry pushes to and pulls from on 127.0.0.1 (Debian's).
registry-tools:
	command -v docker-registry > /dev/null && command -v skopeo > /dev/null || \
		{ apt-get update -qq && apt-get install -y -qq docker-registry skopeo > /dev/null; }

test: setup registry-tools
	$(BIN)/python -m pytest -q

# The runtime tests again with the runtime built under ASan and UBSan (build/asan; scripts/sanitize.sh asan):
# the C++ unit tests, then tests/runtime through the Python binding with the sanitized library preloaded.
# scripts/sanitize.sh tsan and leaks run the TSan concurrency test and the leak check over 10,000 runs.
test-sanitized: setup
	scripts/sanitize.sh asan

# clang for libFuzzer (Debian's), then each fuzz target for FUZZ_SECONDS (scripts/fuzz.sh).
FUZZ_SECONDS ?= 600
fuzz-tools:
	command -v clang++ > /dev/null || { apt-get update -qq && apt-get install -y -qq clang > /dev/null; }

fuzz: setup fuzz-tools
	scripts/fuzz.sh $(FUZZ_SECONDS)

# Operator coverage against PyTorch's OpInfo database: every op's samples through export and the runtime,
# compared with eager; writes docs/coverage.md (about 100 CPU-minutes: JOBS=N runs N ops at a time).
JOBS ?= 2
coverage: setup
	$(BIN)/python -m bench.coverage --jobs $(JOBS) --out docs/coverage.md

# On a machine with an NVIDIA GPU: build the runtime, run tests/gpu and a short benchmark, print a summary.
gpu-check:
	scripts/gpu_check.sh

clean:
	rm -rf build
