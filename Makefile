# SPDX-License-Identifier: GPL-2.0-only
# qprof: `make run` and `make test` do all set-up on a fresh machine.
#   deps      Debian packages, a Python venv with qprof and its PyPI deps
#   fetch     every crate and Go module `build` needs (crates.io, the Go
#             module proxy), so `build` runs offline
#   build     msquic (from crates.io, with cmake), the workload, the probes,
#             inferno, and the transports of the other QUIC implementations from
#             crates.io (quinn's; quiche's, whose boring-sys builds BoringSSL with
#             cmake, g++ and git; tquic's, which builds the BoringSSL it vendors
#             with cmake) and from the Go module proxy (quic-go's, with the Go
#             its go.mod names)
#   run       what `qprof run --stack quic` needs of `build` (msquic, the
#             workload, the probes, inferno: RUN_PARTS), fetched and built
#             alone, then that run
#   lint      ruff (Python) and clang-format (C) check the style
#   test-tools  Debian packages only the tests use (Go's pprof reads qprof's pprof export;
#               chromium loads qprof's HTML reports)
#   test      build, lint, then the whole test suite
#   check     the unit tier only (pytest -m unit): records, flame graphs, options,
#             schema, golden files, presentation; no root, build or network, under a minute
SHELL := /bin/bash
BUILD ?= build
VENV ?= .venv
PY := $(VENV)/bin/python
CC ?= cc
CFLAGS_WL := -O3 -g -fno-omit-frame-pointer -Wall -Wextra -Werror -std=gnu11
APT_PKGS := iproute2 procps openssl libssl-dev cmake ninja-build gcc g++ make perl python3-venv linux-perf bpftrace ethtool iperf3 \
            clang llvm bpftool libbpf-dev libelf-dev zlib1g-dev pkg-config clang-format git \
            libngtcp2-dev libngtcp2-crypto-gnutls-dev libgnutls28-dev libhttp-parser-dev libnghttp2-dev libnghttp3-dev \
            golang-go

.PHONY: all deps apt venv pyc fetch fetch-msquic fetch-inferno fetch-rs fetch-go build msquic msquic-variant workload rs-workloads go-workloads probes inferno guest test-tools bench-tools run lint test check bench clean
all: build

deps: apt venv pyc

apt:
	@build-aux/apt.sh install $(APT_PKGS) $$(command -v cargo >/dev/null || echo cargo)

# The venv: qprof and what it runs on, and EXTRAS (setup.py's extras_require).
# None for `make run` and on a host `qprof remote setup` makes: they run
# measurements. `test` (pytest and what the tests drive, ruff) for the
# targets that run the tests or the linters, which add it to a venv made
# without it.
EXTRAS ?=
TEST_VENV := $(VENV)/.installed-test
test check lint: EXTRAS = test
venv: $(VENV)/.installed
$(VENV)/.installed: setup.py
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.$(if $(EXTRAS),[$(EXTRAS)])'
	touch $@
	$(if $(EXTRAS),touch $(VENV)/.installed-$(EXTRAS))
# Extras added to a venv made without them.
$(VENV)/.installed-%: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[$*]'
	touch $@

# This checkout's Python byte-compiled (its top folders, qprof's packages
# among them, and their subpackages: describe/patterns; not the venv or
# the build), as pip compiles what it installs and not an editable
# install: where PYTHONDONTWRITEBYTECODE is set, as on CI's machines, each
# `qprof` compiled its modules afresh at every start (0.15-0.3 s here, more
# in the TCG guest, whose userland this is). compileall writes whatever
# that says, and only what is stale.
pyc: venv
	@$(PY) -m compileall -q -r 2 -x "/(\.venv|build)/" .

# Everything `build` takes from crates.io and the Go module proxy,
# downloaded here (checksums in the Cargo.lock files and go.sum, Go's
# toolchain checked as any module is); `build` itself then runs offline.
# tests/test_cold_setup.py runs this with an empty CARGO_HOME and GOMODCACHE.
# Each part that builds depends on its own fetch alone, so `run` downloads
# msquic's crate and inferno's, not the other implementations' crates,
# modules and Go.
fetch: fetch-msquic fetch-inferno fetch-rs fetch-go
fetch-msquic: apt
	@workloads/msquic/build.sh --fetch >/dev/null
fetch-inferno: apt
	@flamegraphs/inferno/build.sh --fetch >/dev/null
fetch-rs: apt
	@workloads/rs/build.sh --fetch
fetch-go: apt
	@workloads/go/build.sh --fetch

# What `qprof run --stack quic` needs (and every stack qprof-wl runs by
# itself: tcp, tcp-tls, tcp-ktls, udp, ngtcp2): `run` builds these alone.
# A stack whose transport is another library's is refused, with the
# sentence that names `make build`, until that builds it (core/paths.py).
RUN_PARTS := msquic workload probes inferno
build: $(RUN_PARTS) rs-workloads go-workloads

msquic: fetch-msquic
	workloads/msquic/build.sh $(BUILD)/msquic

WL_SRC := $(wildcard workloads/*.c)
WL_HDR := $(wildcard workloads/*.h)
# --stack ngtcp2: Debian's ngtcp2 and its GnuTLS crypto helper (APT_PKGS).
NGTCP2_PC := libngtcp2 libngtcp2_crypto_gnutls gnutls
NGTCP2_CFLAGS = $(shell pkg-config --cflags $(NGTCP2_PC))
NGTCP2_LIBS = $(shell pkg-config --libs $(NGTCP2_PC))
# The LD_PRELOAD interposers live in workloads/preload/, out of WL_SRC: GSO/GRO
# steering (offload) and the QUIC server's listening address (bind).
PRELOAD_LIB := $(BUILD)/lib/libqprof-offload.so
BIND_LIB := $(BUILD)/lib/libqprof-bind.so
FLOOR_SRC := workloads/floor/qprof_floor.c
FLOOR_BIN := $(BUILD)/bin/qprof-floor $(BUILD)/bin/qprof-floor-quictls
workload: msquic
	@$(MAKE) --no-print-directory $(BUILD)/bin/qprof-wl $(PRELOAD_LIB) $(BIND_LIB) $(FLOOR_BIN)
# The AEAD and copy floor (collectors/floor.py): once against the system's
# OpenSSL (TLS over TCP), once against the quictls msquic links (QUIC).
$(BUILD)/bin/qprof-floor: $(FLOOR_SRC)
	@mkdir -p $(@D)
	$(CC) -O2 -g -Wall -Wextra -Werror -std=gnu11 -o $@ $< -lcrypto
$(BUILD)/bin/qprof-floor-quictls: $(FLOOR_SRC) $(BUILD)/msquic/.stamp
	@mkdir -p $(@D)
	$(CC) -O2 -g -Wall -Wextra -Werror -std=gnu11 -I$(BUILD)/msquic/quictls/include -o $@ $< \
	    $(BUILD)/msquic/quictls/lib/libcrypto.a -lpthread -ldl
$(BUILD)/lib/libqprof-%.so: workloads/preload/%_preload.c workloads/wl_udpio.h
	@mkdir -p $(@D)
	$(CC) -O2 -g -fPIC -shared -fvisibility=hidden -Wall -Wextra -Werror -std=gnu11 -o $@ $< -ldl
$(BUILD)/bin/qprof-wl: $(WL_SRC) $(WL_HDR) $(BUILD)/msquic/.stamp
	@mkdir -p $(BUILD)/bin
	$(CC) $(CFLAGS_WL) -I$(BUILD)/msquic/include $(NGTCP2_CFLAGS) -o $@ $(WL_SRC) \
	    -L$(BUILD)/msquic/lib -lmsquic -lssl -lcrypto $(NGTCP2_LIBS) -lhttp_parser -lnghttp2 -lnghttp3 -lpthread \
	    -ldl -rdynamic -Wl,-rpath,'$$ORIGIN/../msquic/lib'
# --stack quiche: qprof-wl's transport over quiche's C API, in a library of
# its own that qprof-wl loads (wl_plugin.c says why): quiche and the
# BoringSSL it runs on from workloads/rs/quiche-ffi (rs-workloads builds it
# and puts it and the headers in $(BUILD)/rs-ffi), their symbols kept inside.
QUICHE_PLUGIN := $(BUILD)/lib/libqprof-wl-quiche.so
$(QUICHE_PLUGIN): workloads/quiche/wl_quiche.c $(WL_HDR) $(BUILD)/rs-ffi/libqprof_quiche_ffi.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_WL) -fPIC -shared -fvisibility=hidden -I$(BUILD)/rs-ffi/include -o $@ $< \
	    $(BUILD)/rs-ffi/libqprof_quiche_ffi.a -Wl,--exclude-libs,ALL -lstdc++ -lgcc_s -lpthread -ldl -lm
# --stack tquic: the same, over tquic's C API and the BoringSSL tquic vendors
# (workloads/rs/tquic-ffi; rs-workloads puts them in $(BUILD)/rs-ffi/tquic).
TQUIC_PLUGIN := $(BUILD)/lib/libqprof-wl-tquic.so
$(TQUIC_PLUGIN): workloads/tquic/wl_tquic.c $(WL_HDR) $(BUILD)/rs-ffi/tquic/libqprof_tquic_ffi.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_WL) -fPIC -shared -fvisibility=hidden -I$(BUILD)/rs-ffi/tquic/include -o $@ $< \
	    $(BUILD)/rs-ffi/tquic/libqprof_tquic_ffi.a -Wl,--exclude-libs,ALL -lstdc++ -lgcc_s -lpthread -ldl -lm

# A second msquic, built with another flag, that only the tests run: --msquic
# PATH on a build of the user's own (tests/test_msquic_path.py).
MSQUIC_VARIANT := $(BUILD)/msquic-nopool
msquic-variant: fetch-msquic
	workloads/msquic/build.sh $(MSQUIC_VARIANT) -DQUIC_ENABLE_POOL_ALLOC=OFF

# The other QUIC implementations' transports (workloads/rs/): cargo decides
# what is stale.
rs-workloads: fetch-rs
	workloads/rs/build.sh $(BUILD)
	@$(MAKE) --no-print-directory $(QUICHE_PLUGIN) $(TQUIC_PLUGIN)

# quic-go's transport (workloads/go/): Go decides what is stale.
go-workloads: fetch-go
	workloads/go/build.sh $(BUILD)

# eBPF probes: libbpf CO-RE, vmlinux.h generated from this kernel's BTF,
# one skeleton per probe (probes/NAME.bpf.c + NAME.c + NAME.h).
PROBES := $(patsubst probes/%.bpf.c,%,$(wildcard probes/*.bpf.c))
PROBE_BIN := $(patsubst %,$(BUILD)/bin/qprof-%,$(PROBES))
PROBE_HDR := $(wildcard probes/*.h)
BPF_CFLAGS := -g -O2 -target bpf -mcpu=v3 -D__TARGET_ARCH_x86 -Wall -Werror
probes: apt
	@$(MAKE) --no-print-directory $(PROBE_BIN)

$(BUILD)/probes/vmlinux.h:
	@mkdir -p $(@D)
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@

$(BUILD)/probes/%.bpf.o: probes/%.bpf.c $(PROBE_HDR) $(BUILD)/probes/vmlinux.h
	clang $(BPF_CFLAGS) -I$(BUILD)/probes -Iprobes -c $< -o $@

# packets again for kernels before 6.2, without the bpf_rdonly_cast kfunc;
# qprof-packets carries both and loads the one the kernel can take. -mcpu=v2:
# 6.1's verifier gives up on the v3 (32-bit jumps) build of this program
# after 1M instructions; the v2 build passes.
$(BUILD)/probes/packets_portable.bpf.o: probes/packets.bpf.c $(PROBE_HDR) $(BUILD)/probes/vmlinux.h Makefile
	clang $(BPF_CFLAGS) -mcpu=v2 -DQP_PORTABLE -I$(BUILD)/probes -Iprobes -c $< -o $@

$(BUILD)/bin/qprof-packets: $(BUILD)/probes/packets_portable.skel.h

$(BUILD)/probes/%.skel.h: $(BUILD)/probes/%.bpf.o
	bpftool gen skeleton $< > $@.tmp && mv $@.tmp $@

$(BUILD)/bin/qprof-%: probes/%.c probes/probe_common.c $(PROBE_HDR) $(BUILD)/probes/%.skel.h
	@mkdir -p $(@D)
	$(CC) -O2 -g -fno-omit-frame-pointer -Wall -Wextra -Werror -std=gnu11 -I$(BUILD)/probes -Iprobes \
	    -o $@ $< probes/probe_common.c -lbpf -lelf -lz

.PRECIOUS: $(BUILD)/probes/%.bpf.o $(BUILD)/probes/%.skel.h

# Flame graphs: inferno from crates.io (flamegraphs/inferno/Cargo.lock pins
# it; its own published Cargo.lock pins its dependencies), into build/tools.
inferno: fetch-inferno
	@$(MAKE) --no-print-directory $(BUILD)/tools/.inferno
$(BUILD)/tools/.inferno: flamegraphs/inferno/Cargo.lock
	flamegraphs/inferno/build.sh $(BUILD)/tools
	touch $@

# --guest: Debian's stock kernel (never installed: unpacked by qprof with
# dpkg -x), QEMU in TCG, busybox-static for the initramfs.
GUEST_PKGS := qemu-system-x86 busybox-static kmod cpio
guest: apt
	@build-aux/apt.sh install $(GUEST_PKGS)
	@build-aux/apt.sh kernel-deb $(BUILD)/guest

# Readers the tests check qprof's output with, which qprof itself does not
# run: golang-go for `go tool pprof` (tests/test_export.py); chromium and
# its chromium-driver, driven by selenium, for `qprof report` (tests/test_report.py);
# openssh-server for the sshd each test host runs (tests/sshhosts.py).
# Debian's package also enables and starts a system sshd, which no test
# uses: on a machine that had none, it is stopped and disabled again.
TEST_PKGS := golang-go chromium chromium-driver openssh-server
test-tools: apt
	@had_sshd=$$(dpkg-query -W -f='$${Status}' openssh-server 2>/dev/null); \
	build-aux/apt.sh install $(TEST_PKGS) && case "$$had_sshd" in *"ok installed"*) ;; \
	*) if [ -d /run/systemd/system ]; then systemctl disable --now -q ssh.service ssh.socket; \
	   else update-rc.d ssh disable >/dev/null && { invoke-rc.d ssh stop >/dev/null 2>&1 || true; }; fi ;; esac

# Reference tools only benchmarks/ runs, from Debian: ngtcp2's examples
# (gtlsclient, gtlsserver) beside qprof's ngtcp2 (benchmarks/fidelity.py).
BENCH_PKGS := ngtcp2-client ngtcp2-server
bench-tools: apt
	@build-aux/apt.sh install $(BENCH_PKGS)

run: deps $(RUN_PARTS)
	$(VENV)/bin/qprof run --stack quic

# Style, as ruff.toml and .clang-format say; part of `make test`.
C_SRC := $(shell git ls-files 'probes/*.c' 'probes/*.h' 'workloads/*.c' 'workloads/*.h' 'workloads/*/*.c' 'workloads/go/*/*.[ch]' 2>/dev/null)
lint: deps $(TEST_VENV)
	cargo fmt --manifest-path workloads/rs/Cargo.toml --all -- --check
	workloads/go/build.sh --fmt-check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	clang-format --dry-run --Werror --style=file $(C_SRC)

# The guest tier's emulator runs the guest on one thread (TCG's
# thread=single), which leaves about one CPU of two to spare for its five
# minutes: beside it run the tests that measure nothing, the unit tier and
# those marked `beside` (the downloads from empty caches, the reports in
# Chromium, `remote setup` with its build), a session of their own
# (QPROF_TEST_SESSION: what each made is its own, tests/conftest.py) at a
# lower priority, so the emulator keeps its CPU; their temporary files
# apart, their output printed after; SIGINT as a foreground job has it (a
# shell starts a background job with it ignored, and the unit tier
# interrupts its stand-ins). Measured here: the guest
# tier 273 s alone and 303 with the unit tier and the downloads beside it,
# they 65 + 45 s alone. The system and network tiers measure: they run
# alone, and whatever the first two found.
PYTEST := $(VENV)/bin/python -m pytest -ra
test: deps $(TEST_VENV) build msquic-variant guest test-tools lint
	@t0=$$(date +%s); tmp=$$(mktemp -d /tmp/qprof-beside.XXXXXX); \
	QPROF_TEST_SESSION=beside TMPDIR=$$tmp nice -n 10 env --default-signal=INT $(PYTEST) -q -p no:cacheprovider \
		--durations=10 -m 'unit or beside' tests > $$tmp.log 2>&1 & \
	beside=$$!; \
	QPROF_TEST_SESSION=guest $(PYTEST) -m guest --durations=30 tests; guest=$$?; \
	wait $$beside; rc=$$?; echo "== beside the guest tier: the unit tier and the tests marked beside"; \
	cat $$tmp.log; rm -rf $$tmp $$tmp.log; \
	$(PYTEST) -m '(system or network) and not beside' --durations=30 tests; rest=$$?; \
	echo "== the suite: $$(( $$(date +%s) - t0 )) s of tests; exit: guest $$guest, beside it $$rc, the rest $$rest"; \
	test $$guest -eq 0 -a $$rc -eq 0 -a $$rest -eq 0

# The fast tier (pytest.ini's markers): the venv alone, as any user; `test` runs it too.
check: venv $(TEST_VENV)
	$(VENV)/bin/python -m pytest -m unit -q -ra tests

clean:
	rm -rf $(BUILD) $(VENV)
