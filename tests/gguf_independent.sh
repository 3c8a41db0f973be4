#!/usr/bin/env bash
# gguf_independent.sh - validate a GGUF file with an independent parser
# (the npm package @huggingface/gguf), so that our writer and reader are not
# only checked against each other.
#
# Usage:
#   gguf_independent.sh FILE [EXPECTED.json]
#       parse FILE; check its layout; compare with EXPECTED if given
#   gguf_independent.sh --compare TEST_GGUF FILE
#       EXPECTED = what our reader sees (`TEST_GGUF --describe FILE`), so any
#       GGUF, e.g. one made by `confkv convert`, is read by both parsers and
#       the two views must agree
#   gguf_independent.sh --sample TEST_GGUF
#       write the sample file of test_gguf (every value type, f32/f16/bf16/
#       q8_0 tensors) and check it against both the writer's intent and our
#       reader's view
# TEST_GGUF is the path of the built tests/test_gguf program.
#
# The package is installed on first use into ${CONFKV_NPM_CACHE:-~/.cache/
# confkv-npm}. Exit codes: 0 pass, 1 mismatch or parse failure, 2 usage,
# 77 skipped (no node/npm, or the install failed), as ctest's SKIP_RETURN_CODE.
set -u

self=${BASH_SOURCE[0]}
case "$self" in */*) here=${self%/*} ;; *) here=. ;; esac
here=$(cd "$here" && pwd)
pkg_spec='@huggingface/gguf@^0.4.6'
cache=${CONFKV_NPM_CACHE:-${HOME:-/tmp}/.cache/confkv-npm}

usage() {
    sed -n '6,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

skip() {
    echo "skipped: $*"
    exit 77
}

ensure_parser() {
    command -v node >/dev/null 2>&1 || skip "node is not installed"
    local major
    major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null) ||
        skip "node does not run"
    [ "$major" -ge 18 ] 2>/dev/null || skip "node $major is older than 18"
    if [ ! -f "$cache/node_modules/@huggingface/gguf/package.json" ]; then
        command -v npm >/dev/null 2>&1 || skip "npm is not installed"
        mkdir -p "$cache" || skip "cannot create $cache"
        if ! npm install --prefix "$cache" --no-audit --no-fund \
            --loglevel=error "$pkg_spec" >"$cache/install.log" 2>&1; then
            skip "npm install $pkg_spec failed (see $cache/install.log)"
        fi
    fi
}

check() { # FILE [EXPECTED]
    node "$here/gguf_independent.mjs" "$cache" "$@"
}

[ $# -ge 1 ] || usage
case "$1" in
--sample)
    [ $# -eq 2 ] || usage
    bin=$2
    ensure_parser
    tmp=$(mktemp -d /tmp/confkv-gguf-ind-XXXXXX) || exit 1
    trap 'rm -rf "$tmp"' EXIT
    "$bin" --write-sample "$tmp/sample.gguf" >"$tmp/spec.json" || exit 1
    "$bin" --describe "$tmp/sample.gguf" >"$tmp/ours.json" || exit 1
    check "$tmp/sample.gguf" "$tmp/spec.json" >"$tmp/out1.json" || {
        cat "$tmp/out1.json"
        exit 1
    }
    check "$tmp/sample.gguf" "$tmp/ours.json" || exit 1
    echo "ok: @huggingface/gguf agrees with the writer and with our reader"
    ;;
--compare)
    [ $# -eq 3 ] || usage
    bin=$2 file=$3
    ensure_parser
    tmp=$(mktemp -d /tmp/confkv-gguf-ind-XXXXXX) || exit 1
    trap 'rm -rf "$tmp"' EXIT
    "$bin" --describe "$file" >"$tmp/ours.json" || exit 1
    check "$file" "$tmp/ours.json" || exit 1
    echo "ok: @huggingface/gguf agrees with our reader on $file"
    ;;
-*)
    usage
    ;;
*)
    [ $# -le 2 ] || usage
    [ -f "$1" ] || { echo "gguf_independent: no such file: $1" >&2; exit 2; }
    ensure_parser
    check "$@"
    ;;
esac
