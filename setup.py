"""Build the optional native core (rmqtool/kernels/_native.c); everything else is in pyproject.toml.

Without a C compiler, Python headers or zlib's header, the build warns and rmqtool runs its numpy
path (the reference the native core is proven equal to). RMQTOOL_NATIVE_CFLAGS / _LDFLAGS add
flags (CI builds once with -fsanitize=address,undefined).
"""
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """A failed native build is a warning, not a failed install."""

    def run(self):
        try:
            super().run()
        except Exception as exc:                # no compiler at all
            self.warn(f"rmqtool native core not built ({exc}); the numpy path will run")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:                # a compile or link error
            self.warn(f"rmqtool native core not built ({exc}); the numpy path will run")


native = Extension(
    "rmqtool.kernels._native",
    sources=["rmqtool/kernels/_native.c"],
    libraries=["z"],
    extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra"] + os.environ.get("RMQTOOL_NATIVE_CFLAGS", "").split(),
    extra_link_args=os.environ.get("RMQTOOL_NATIVE_LDFLAGS", "").split(),
)

setup(ext_modules=[native], cmdclass={"build_ext": OptionalBuildExt})
