#!/bin/sh
# The README's commands on a bare Debian 12: `./make.sh run` runs the default job, `./make.sh test`
# the test suite. Installs make when the machine lacks it (a minimal Debian has none), then hands the
# target to the Makefile, whose targets install every other package they need
# (scripts/install-deps.sh, idempotent).
set -eu
cd "$(dirname "$0")"
if ! command -v make >/dev/null 2>&1; then
  echo "make.sh: installing make"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends make
fi
exec make "$@"
