#!/usr/bin/env bash
# deps.sh: installs what sparsejit builds and tests with on Debian/Ubuntu (run as root).
# The CUDA Toolkit (NVRTC, cuda.h, cuBLAS) is expected at /usr/local/cuda.
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq cmake gcc make pkg-config bc python3-pip liblua5.4-dev libsqlite3-dev libcmocka-dev libssl-dev >/dev/null
# cuobjdump for the SASS tests (the Debian CUDA toolkit image may lack it)
if ! command -v cuobjdump >/dev/null && [ ! -x /usr/local/cuda/bin/cuobjdump ]; then
  python3 -m pip install -q 'nvidia-cuda-cuobjdump>=13,<14' 'nvidia-cuda-nvdisasm>=13,<14' 2>/dev/null ||
    python3 -m pip install -q --break-system-packages 'nvidia-cuda-cuobjdump>=13,<14' 'nvidia-cuda-nvdisasm>=13,<14' || true
fi
[ -e /usr/local/cuda/include/nvrtc.h ] || { echo "deps.sh: no CUDA Toolkit at /usr/local/cuda (NVRTC needed)" >&2; exit 1; }
