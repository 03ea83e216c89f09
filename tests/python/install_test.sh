#!/usr/bin/env bash
# `make install` puts the package where Debian's /usr/bin/python3 finds it under the prefix
# (<prefix>/lib/python3.X/dist-packages/cohort), and it imports from there and registers the
# backend. Installs into a temporary prefix.
#   install_test.sh BUILD_DIR
set -euo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$1" --prefix "$tmp" >/dev/null
site=$(/usr/bin/python3 -c 'import sys; print("lib/python%d.%d/dist-packages" % sys.version_info[:2])')
[[ -f $tmp/$site/cohort/__init__.py ]] || { echo "install_test: no $site/cohort under the prefix"; exit 1; }
# What /usr/bin/python3 reads for the default prefix /usr/local is the same relative path.
/usr/bin/python3 -c 'import sys; assert "/usr/local/'"$site"'" in sys.path, sys.path'
cd "$tmp"
PYTHONPATH=$tmp/$site /usr/bin/python3 -c '
import cohort, torch.distributed as dist
assert cohort.__file__.startswith("'"$tmp"'"), cohort.__file__
assert hasattr(dist.Backend, "COHORT")
print("install_test: imported", cohort.__file__)'
