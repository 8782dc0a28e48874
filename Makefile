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

.PHONY: help deps bootstrap lock lint sanity units integration images repos molecule test site lab lab-down lab-test lab-gang clean build changelog

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

deps: ## Install the Debian packages the tests need (root; no-op when present)
	tests/harness/install-deps.sh

bootstrap: $(VENV)/.installed $(COLLECTION_LINK) ## Create the pinned virtualenv (.venv) and link the collection

$(VENV)/.installed: requirements.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -r requirements.txt -c constraints.txt
	touch $@

$(COLLECTION_LINK):
	mkdir -p $(dir $@)
	ln -sfn $(CURDIR) $@

lock: ## Re-resolve requirements.txt into constraints.txt (fresh throwaway venv)
	rm -rf .build/lock && $(PYTHON) -m venv .build/lock
	.build/lock/bin/pip install --quiet -r requirements.txt
	{ echo '# Full transitive pin set for requirements.txt (pip freeze of a fresh bootstrap). Regenerate with `make lock`.'; \
	  .build/lock/bin/pip freeze --exclude-editable; } > constraints.txt

lint: bootstrap ## yamllint + ansible-lint (production profile)
	yamllint --strict .
	ansible-lint --offline

sanity: bootstrap ## ansible-test sanity on a copy placed under ansible_collections/gpufleet/vgpu
	tests/harness/sanity.sh

units: bootstrap ## Unit tests of pure logic (pytest)
	pytest tests/unit

integration: bootstrap ## Playbook-level tests that need no test host (pytest)
	pytest tests/integration

images: ## Build (or reuse) the systemd test-host images
	tests/harness/build-images.sh

repos: ## Build (or reuse) the signed local package repositories
	tests/harness/build-repos.sh

molecule: bootstrap images repos ## All molecule scenarios, two at a time
	tests/harness/molecule-all.sh $(SCENARIOS)

test: deps bootstrap ## Everything: lint, sanity, units, integration, lab end-to-end, molecule
	tests/harness/test-all.sh

build: bootstrap ## Build the collection tarball
	ansible-galaxy collection build --force --output-path .build/dist

changelog: bootstrap ## Render CHANGELOG.rst from changelogs/fragments
	antsibull-changelog lint && antsibull-changelog generate

site: ## The main job: playbooks/site.yml end to end on the built-in local lab (not there yet, see README)
	@echo "make site: not available yet. It needs Volcano in the local lab and site.yml, which are not implemented." >&2
	@echo "What works today: 'make lab' (control plane + kwok nodes, no Volcano yet) and 'make test'. See README.md." >&2
	@exit 2

lab: bootstrap ## Start the local lab: etcd, kube-apiserver, controller-manager, kwok nodes (Volcano: not yet)
	python tools/lab/lab.py up

lab-down: bootstrap ## Stop everything the local lab started
	python tools/lab/lab.py down

lab-test: bootstrap ## End-to-end tests of the local lab (builds its pinned binaries once)
	pytest tests/lab

lab-gang: bootstrap ## The gang test on the lab's Volcano (flaky on Volcano 1.10, not in make test; see tools/lab/README.md)
	pytest tests/lab/test_gang.py

clean: ## Remove build outputs (keeps the image and repo cache in $(GPUFLEET_CACHE))
	rm -rf .build tests/output
