# Set-up, demo and tests. `make demo` and `make test` each set up what they need first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# A pinned CPU build of PyTorch; a machine that already has torch in the venv keeps its own.
TORCH_SPEC ?= torch==2.13.0
DEMO := build/demo

.PHONY: setup runtime registry-tools triton-server triton-server-bundle demo test test-sanitized fuzz-tools fuzz coverage clean gpu-check

setup: $(VENV)/.installed runtime

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[test,cuda,models,registry,serving]"
	touch $@

# The C++ runtime: libaotpack and aotpack-run in build/runtime, where the editable install finds them
# (runtime_files.py; $(BIN)/aotpack-run runs the tool there). `pip install .` builds them into the wheel instead.
runtime: $(VENV)/.installed
	cmake -S runtime_cpp -B build/runtime -DCMAKE_BUILD_TYPE=Release > /dev/null
	cmake --build build/runtime -j2

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

# Triton Inference Server for tests/serving and scripts/triton_bench.py: the tritonserver binary and its
# libraries from the nvidia-pytriton wheel (Triton 2.51.0, CPU and GPU, with no backends but python),
# installed apart from the venv into a cache shared by checkouts. tests/serving finds it through TRITON_HOME.
PYTRITON_SPEC ?= nvidia-pytriton==0.7.0
TRITON_HOME ?= $(HOME)/.cache/aotpack/tritonserver-pytriton-0.7.0
triton-server: $(TRITON_HOME)/.installed
$(TRITON_HOME)/.installed: | $(VENV)/.installed
	$(BIN)/pip install --quiet --no-deps --upgrade --target $(TRITON_HOME) "$(PYTRITON_SPEC)"
	! ldd $(TRITON_HOME)/pytriton/tritonserver/bin/tritonserver | grep "not found" || \
		{ echo "tritonserver from $(PYTRITON_SPEC) misses the libraries above on this machine" >&2; exit 1; }
	touch $@

# The server and only the libraries it loads (about 26 MB, xz), to carry to a machine without network (the GPU
# machine: docs/serving.md). There: mkdir -p DIR && tar -xJf tritonserver-bundle.tar.xz -C DIR; TRITON_HOME=DIR.
TRITON_BUNDLE := build/tritonserver-bundle.tar.xz
triton-server-bundle: $(TRITON_BUNDLE)
$(TRITON_BUNDLE): $(TRITON_HOME)/.installed
	mkdir -p build
	cd $(TRITON_HOME) && tar -cf - pytriton/tritonserver/bin/tritonserver \
		$$(ldd pytriton/tritonserver/bin/tritonserver | grep -o 'nvidia_pytriton.libs/[^ ]*' | sort -u) \
		| xz -6 -T2 > $(CURDIR)/$@

test: setup registry-tools triton-server
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
