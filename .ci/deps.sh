#!/usr/bin/env bash
# deps.sh: installs what sparsejit builds and tests with on Debian/Ubuntu: as root, or through
# sudo when run by a user (a root container has no sudo, so the README's command does not name it).
# The CUDA Toolkit (NVRTC, cuda.h, cuBLAS) is expected at /usr/local/cuda.
set -eu
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "deps.sh: installing packages needs root, and there is no sudo here" >&2; exit 1; }
  exec sudo bash "$0" "$@"
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq cmake gcc make pkg-config bc python3-pip liblua5.4-dev libsqlite3-dev libcmocka-dev libssl-dev python3-venv >/dev/null
# cuobjdump for the SASS tests (the Debian CUDA toolkit image may lack it)
if ! command -v cuobjdump >/dev/null && [ ! -x /usr/local/cuda/bin/cuobjdump ]; then
  python3 -m pip install -q 'nvidia-cuda-cuobjdump>=13,<14' 'nvidia-cuda-nvdisasm>=13,<14' 2>/dev/null ||
    python3 -m pip install -q --break-system-packages 'nvidia-cuda-cuobjdump>=13,<14' 'nvidia-cuda-nvdisasm>=13,<14' || true
fi
[ -e /usr/local/cuda/include/nvrtc.h ] || { echo "deps.sh: no CUDA Toolkit at /usr/local/cuda (NVRTC needed)" >&2; exit 1; }
