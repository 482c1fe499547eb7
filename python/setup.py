"""python/setup.py: builds the torch extension through CMake (mxmoe_build.py) when pip builds
the package. Use `pip install --no-build-isolation ./python` so that it compiles against the
torch that is installed (an isolated build would fetch a different torch)."""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mxmoe_build  # noqa: E402


class CMakeExtension(Extension):
    def __init__(self):
        super().__init__("mxmoe.torch.libmxmoe_torch", sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("MXMOE_BUILD_DIR",
                                   os.path.join(os.path.abspath(self.build_temp), "cmake"))
        lib, _ = mxmoe_build.build(build_dir, os.environ.get("MXMOE_TORCH_CUDA", "auto"))
        dst_dir = os.path.join(os.path.abspath(self.build_lib), "mxmoe", "torch")
        os.makedirs(dst_dir, exist_ok=True)
        self.copy_file(lib, os.path.join(dst_dir, mxmoe_build.LIB))


setup(ext_modules=[CMakeExtension()], cmdclass={"build_ext": CMakeBuild})
