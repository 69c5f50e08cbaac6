# shellcheck shell=bash
# $stdenv/setup for tests/nix/build_sandbox.py: what nixpkgs' pkgs/stdenv/generic/setup.sh does for a
# runCommand (a buildCommand, no phases, inputs without setup hooks), written from its behaviour. The
# emulation fills in @shell@ (stdenv.shell) and @initialPath@ (common-path.nix's store paths).

set -eu
set -o pipefail
shopt -s inherit_errexit

export SHELL=@shell@
initialPath="@initialPath@"

# A fixed "now" for tools that stamp their output.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-315532800}"

# Globs that match nothing expand to nothing.
shopt -s nullglob

_addToSearchPath() { # name dir: append dir when it exists and is not there yet
    [[ -d "$2" && ":${!1:-}:" != *":$2:"* ]] || return 0
    export "$1=${!1:+${!1}:}$2"
}

# PATH: the derivation's inputs first, in their order, then stdenv's tools.
PATH=
for _p in $initialPath; do _addToSearchPath PATH "$_p/bin"; done
HOST_PATH=$PATH
export CONFIG_SHELL="$SHELL"
_path= _data=
for _p in ${nativeBuildInputs:-} ${propagatedNativeBuildInputs:-}; do
    if [ ! -e "$_p" ]; then
        echo "build input $_p does not exist" >&2
        exit 1
    fi
    _addToSearchPath _path "$_p/bin"
    _addToSearchPath _data "$_p/share"
done
PATH="${_path}${_path:+:}$PATH"
export XDG_DATA_DIRS="$_data"
unset _p _path _data

export TZ=UTC

NIX_BUILD_CORES="${NIX_BUILD_CORES:-1}"
if ((NIX_BUILD_CORES <= 0)); then
    NIX_BUILD_CORES=$(nproc 2>/dev/null || echo 1)
fi
export NIX_BUILD_CORES

# No certificates from the machine's /etc/ssl.
export NIX_SSL_CERT_FILE="${NIX_SSL_CERT_FILE:-/no-cert-file.crt}"
export SSL_CERT_FILE="${SSL_CERT_FILE:-/no-cert-file.crt}"

genericBuild() {
    export GZIP_NO_TIMESTAMPS=1
    if [ -f "${buildCommandPath:-}" ]; then
        source "$buildCommandPath"
        return
    fi
    if [ -n "${buildCommand:-}" ]; then
        eval "$buildCommand"
        return
    fi
    echo "this emulation of stdenv runs a buildCommand only (no phases)" >&2
    exit 1
}

export 2>/dev/null >|"$NIX_BUILD_TOP/env-vars" || true

# The builder runs `bash -e`: setup.sh leaves errexit on and nounset off when it returns.
set +u
