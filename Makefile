# gpufleet.vgpu developer entry points. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= $(CURDIR)/.venv
BIN := $(VENV)/bin
COLLECTION_LINK := $(CURDIR)/.build/collections/ansible_collections/gpufleet/vgpu

export GPUFLEET_CACHE ?= /var/cache/gpufleet
export CONTAINERS_CONF := $(CURDIR)/tests/harness/containers.conf
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.build/collections
export PATH := $(BIN):$(PATH)

.PHONY: help deps bootstrap lock lint docs sanity units integration images repos molecule test site site-loop site-ci lab lab-down lab-test lab-gang lab-gang-fix bench bench-run clean build changelog ee timings

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

deps: ## Install the Debian packages the tests need (root; no-op when present)
	tests/harness/install-deps.sh

bootstrap: $(VENV)/.installed $(VENV)/.paths $(COLLECTION_LINK) ## Create the pinned virtualenv (.venv) and link the collection

$(VENV)/.installed: requirements.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	@echo "[bootstrap] pip: installing the pinned toolchain into .venv (ansible, molecule, linters; a few minutes cold)"
	@t0=$$SECONDS; $(BIN)/pip install --quiet -r requirements.txt -c constraints.txt \
	  && echo "[bootstrap] pip: done in $$((SECONDS - t0)) s"
	touch $@

# The one way tests, benchmarks and the lab import this checkout's Python: the collection as
# ansible_collections.gpufleet.vgpu (through .build/collections), the lab as gpufleet_lab, the benchmarks' modules.
$(VENV)/.paths: $(VENV)/.installed Makefile
	printf '%s\n' $(CURDIR)/.build/collections $(CURDIR)/tools/lab $(CURDIR)/tools/bench $(CURDIR)/tools/docs \
	  > "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gpufleet-checkout.pth"
	touch $@

$(COLLECTION_LINK):
	mkdir -p $(dir $@)
	ln -sfn $(CURDIR) $@

lock: ## Re-resolve requirements.txt into constraints.txt (fresh throwaway venv)
	rm -rf .build/lock && $(PYTHON) -m venv .build/lock
	.build/lock/bin/pip install --quiet -r requirements.txt
	{ echo '# Full transitive pin set for requirements.txt (pip freeze of a fresh bootstrap). Regenerate with `make lock`.'; \
	  .build/lock/bin/pip freeze --exclude-editable; } > constraints.txt

lint: bootstrap ## yamllint + ansible-lint (production profile); role READMEs' variable tables as `make docs` writes them
	yamllint --strict .
	ansible-lint --offline
	python tools/docs/role_docs.py --check
	python tools/docs/timings.py --check

docs: bootstrap ## Write each role README's variable table from its meta/argument_specs.yml
	python tools/docs/role_docs.py

timings: bootstrap ## File the last `make test`'s record under docs/timings/ and render docs/timings.md from them
	python tools/docs/timings.py --file .build/timings/make-test.json

sanity: bootstrap ## ansible-test sanity on a copy placed under ansible_collections/gpufleet/vgpu
	tests/harness/sanity.sh

units: bootstrap ## Unit tests of pure logic (pytest), and the Go tests of tools/upstream's patches
	pytest tests/unit
	tools/upstream/volcano/check.sh

integration: bootstrap ## Playbook-level tests that need no test host (pytest)
	pytest tests/integration

# The images the lab's GPU hosts (and B1's) start from; molecule needs all three (IMAGES empty).
LAB_IMAGES := el9
images: ## Build (or reuse) the systemd test-host images (IMAGES="el9 debian13" for some)
	tests/harness/build-images.sh $(IMAGES)

repos: ## Build (or reuse) the signed local package repositories
	tests/harness/build-repos.sh

molecule: bootstrap images repos ## All molecule scenarios, two at a time
	tests/harness/molecule-all.sh $(SCENARIOS)

test: deps bootstrap ## Everything: lint, sanity, units, integration, lab end-to-end (make site among them), molecule
	tests/harness/test-all.sh

build: bootstrap ## Build the collection tarball
	ansible-galaxy collection build --force --output-path .build/dist

ee: build ## The execution environment's build context (.build/ee/context) for AWX; docs/awx.md builds the image
	rm -rf .build/ee && mkdir -p .build/ee
	cp .build/dist/gpufleet-vgpu-$$(sed -n 's/^version: *//p' galaxy.yml).tar.gz .build/ee/gpufleet-vgpu.tar.gz
	ansible-builder create --file execution-environment.yml --context .build/ee/context

changelog: bootstrap ## Render CHANGELOG.rst from changelogs/fragments
	antsibull-changelog lint && antsibull-changelog generate

# The lab's Go builds (CPU) run while the test-host images the lab uses (LAB_IMAGES) and the repositories are built
# (network and disk): on a fresh machine that saves the image time. Its progress lines ([lab-build] ..., each with
# its time) show as they come; the full log is kept and printed when a build fails.
define lab_build_with_images
	mkdir -p $(GPUFLEET_CACHE)
	( set -o pipefail; tools/lab/build.sh 2>&1 | tee $(GPUFLEET_CACHE)/lab-build.log | grep --line-buffered '^\[lab-build\]' ) & build=$$!; \
	$(MAKE) --no-print-directory images repos IMAGES="$(LAB_IMAGES)"; rc=$$?; \
	if ! wait $$build; then tail -n 80 $(GPUFLEET_CACHE)/lab-build.log; exit 1; fi; exit $$rc
endef

site: deps bootstrap ## The main job: the local lab (if not up) and playbooks/site.yml end to end, then the report
	$(lab_build_with_images)
	python tools/lab/lab.py status >/dev/null 2>&1 || { python tools/lab/lab.py down && python tools/lab/lab.py up; }
	t0=$$(date +%s); GPUFLEET_REPORT_DIR=$(CURDIR)/gpufleet-report ansible-playbook -i inventories/lab playbooks/site.yml; \
	  rc=$$?; echo "[site] playbooks/site.yml took $$(( $$(date +%s) - t0 )) s"; exit $$rc
	@cat gpufleet-report/report.md
	@echo "Report: gpufleet-report/report.md, smoke.json and capacity.png. The lab keeps running; its cluster, with the kubectl it built:"
	@python tools/lab/lab.py status | sed -n 's/^KUBECONFIG=\(.*\)/  export KUBECONFIG=\1/p; s/^KUBECTL=\(.*\)/  \1 get nodes/p'
	@echo "'make lab-down' stops it."

SITE_RUNS ?= 5
site-loop: deps bootstrap ## `make site` SITE_RUNS times in a row (default 5) from a fresh lab: a line per run, logs in .build/site-loop
	python tools/lab/lab.py down
	@mkdir -p .build/site-loop; passed=0; for run in $$(seq 1 $(SITE_RUNS)); do t0=$$SECONDS; \
	  if $(MAKE) --no-print-directory site >.build/site-loop/run-$$run.log 2>&1; then verdict=passed; passed=$$((passed + 1)); \
	  else verdict=FAILED; fi; \
	  echo "[site-loop] run $$run of $(SITE_RUNS): $$verdict in $$((SECONDS - t0)) s (.build/site-loop/run-$$run.log)"; \
	done; echo "[site-loop] $$passed of $(SITE_RUNS) passed"; [ $$passed -eq $(SITE_RUNS) ]

site-ci: bootstrap ## `make site` on a fresh lab of its own, then that lab stopped (make lab-test runs make site too)
	GPUFLEET_LAB_DIR=$(GPUFLEET_CACHE)/lab-site-ci python tools/lab/lab.py down
	GPUFLEET_LAB_DIR=$(GPUFLEET_CACHE)/lab-site-ci $(MAKE) --no-print-directory site; rc=$$?; \
	GPUFLEET_LAB_DIR=$(GPUFLEET_CACHE)/lab-site-ci python tools/lab/lab.py down; exit $$rc

lab: IMAGES = $(LAB_IMAGES)
lab: bootstrap images repos ## Start the local lab (reused when healthy, replaced when broken); vGPUs come with site.yml or cluster.yml
	@if python tools/lab/lab.py status >/dev/null 2>&1; then echo "The lab is up and healthy; reusing it."; \
	else python tools/lab/lab.py down && python tools/lab/lab.py up; fi
	@python tools/lab/lab.py status | sed -n 's/^\(KUBECONFIG\|KUBECTL\)=/\1=/p'
	@echo "GPU nodes get vGPU capacity from the device plugin: run 'make site' (or cluster.yml) next."

lab-down: bootstrap ## Stop everything the local lab started (processes by PID, host containers)
	python tools/lab/lab.py down

lab-test: bootstrap images repos ## End-to-end tests on a lab of their own: lab, gang, roles, site.yml (builds its binaries once)
	pytest --durations=15 tests/lab

lab-gang: bootstrap images repos ## Only the gang test on the lab's Volcano
	pytest tests/lab/test_gang.py

lab-gang-fix: bootstrap images repos ## The gang test on a lab running the scheduler with tools/upstream/volcano's patches
	GPUFLEET_LAB_VOLCANO_FIX=1 pytest tests/lab/test_gang.py

# The run's start, before any install or build, and which caches it found: bench.py records them in
# docs/benchmarks/run.json, so the page states what a cold or a warm `make bench` took.
bench: ## Benchmarks B1-B3: raw JSON in docs/benchmarks/, and docs/benchmarks.md rendered from it
	@printf '{"started": %s, "debian_packages": %s, "lab_binaries_cached": %s, "virtualenv": %s, "image_debian12": %s, "image_el9": %s, "go_module_cache": %s, "go_build_cache": %s}\n' \
	  "$$(date +%s)" "$$(tests/harness/install-deps.sh --check && echo true || echo false)" \
	  "$$(test -d $(GPUFLEET_CACHE)/lab-bin && echo true || echo false)" \
	  "$$(test -e $(VENV)/.installed && echo true || echo false)" \
	  "$$(podman image exists localhost/gpufleet-debian:12 2>/dev/null && echo true || echo false)" \
	  "$$(podman image exists localhost/gpufleet-el9:9 2>/dev/null && echo true || echo false)" \
	  "$$(test -n "$$(ls -A "$$(go env GOMODCACHE 2>/dev/null)/cache/download" 2>/dev/null)" && echo true || echo false)" \
	  "$$(test -n "$$(ls -A "$$(go env GOCACHE 2>/dev/null)" 2>/dev/null)" && echo true || echo false)" > .bench-start.json
	$(MAKE) --no-print-directory bench-run

bench-run: deps bootstrap
	$(lab_build_with_images)
	python tools/bench/bench.py --start-file .bench-start.json $(BENCH_ARGS)

clean: ## Remove build outputs (keeps the images, repositories and lab binaries cached in GPUFLEET_CACHE, default /var/cache/gpufleet)
	rm -rf .build tests/output
