"""python/mxmoe_build.py: configure and build the mxmoe torch extension with CMake against the
installed torch; used by setup.py (pip) and directly by ci.sh / gpu_check.sh:

    python python/mxmoe_build.py [--build-dir DIR] [--cuda auto|0|1] [--inplace]

--inplace copies libmxmoe_torch.so into python/mxmoe/torch/ so that PYTHONPATH=python works
without pip. Environment: MXMOE_TORCH_CUDA (same as --cuda), MXMOE_JOBS (ninja -j, default 2),
MXMOE_CMAKE_ARGS (extra -D flags, e.g. -DMXMOE_JSON_INCLUDE=.deps/json on a machine without
nlohmann-json installed). Prints one line saying whether the CUDA ops were built.
"""
import argparse
import os
import shlex
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = "libmxmoe_torch.so"


def want_cuda(mode):
    """auto: a CUDA torch and an nvcc; 0/1 force it (1 fails later if either is missing)."""
    import torch

    if mode in ("0", "off", "OFF"):
        return False, "disabled by MXMOE_TORCH_CUDA=0"
    has_nvcc = shutil.which("nvcc") is not None or os.path.exists("/usr/local/cuda/bin/nvcc")
    if mode in ("1", "on", "ON"):
        return True, "forced by MXMOE_TORCH_CUDA=1"
    if torch.version.cuda is None:
        return False, "torch %s has no CUDA" % torch.__version__
    if not has_nvcc:
        return False, "no nvcc found"
    return True, "torch %s (CUDA %s) and nvcc found" % (torch.__version__, torch.version.cuda)


def build(build_dir, cuda_mode="auto", jobs=None):
    """Configures and builds; returns the path of the built library."""
    import torch
    import torch.utils.cpp_extension as cpp

    cuda, why = want_cuda(cuda_mode)
    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    args = [
        "cmake", "-S", HERE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
        "-DMXMOE_TORCH_INCLUDE=" + ";".join(cpp.include_paths()),
        "-DMXMOE_TORCH_LIBDIR=" + libdir,
        "-DMXMOE_TORCH_CXX11_ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI),
        "-DMXMOE_TORCH_CUDA=" + ("ON" if cuda else "OFF"),
    ]
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    if cuda and not shutil.which("nvcc") and os.path.exists("/usr/local/cuda/bin/nvcc"):
        args.append("-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc")
    args += shlex.split(os.environ.get("MXMOE_CMAKE_ARGS", ""))
    json_dir = os.path.join(HERE, "..", ".deps", "json")
    if not os.path.exists("/usr/include/nlohmann/json.hpp") and os.path.isdir(json_dir):
        args.append("-DMXMOE_JSON_INCLUDE=" + os.path.abspath(json_dir))
    print("mxmoe_build: CUDA ops %s (%s)" % ("ON" if cuda else "OFF", why), flush=True)
    subprocess.check_call(args)
    jobs = jobs or os.environ.get("MXMOE_JOBS", "2")
    subprocess.check_call(["cmake", "--build", build_dir, "--target", "mxmoe_torch",
                           "-j", str(jobs)])
    return os.path.join(build_dir, LIB), cuda


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.path.join(HERE, "build", "cmake"))
    ap.add_argument("--cuda", default=os.environ.get("MXMOE_TORCH_CUDA", "auto"))
    ap.add_argument("--inplace", action="store_true")
    a = ap.parse_args()
    lib, cuda = build(os.path.abspath(a.build_dir), a.cuda)
    if a.inplace:
        dst = os.path.join(HERE, "mxmoe", "torch", LIB)
        shutil.copy2(lib, dst)
        lib = dst
    print("mxmoe_build: %s (CUDA ops %s)" % (lib, "ON" if cuda else "OFF"))


if __name__ == "__main__":
    sys.exit(main())
