"""Builds tensorbroker's extension through CMake, for pyproject.toml. Two ways:

- Bundled (the default): the project's CMake builds the client library and the extension
  (_core); the wheel carries libtensorbroker_client.so.0 and libtensorbroker_proto.so.0 beside
  _core, each finding the next there through an $ORIGIN run path (TENSORBROKER_PYTHON_WHEEL=ON).
  The wheel needs no LD_LIBRARY_PATH and no installed tensorbroker, only the system libraries they
  link (gRPC, protobuf, Abseil from Debian): what a venv of its own wants.
- Against an installed tensorbroker (TENSORBROKER_PREFIX=/usr, or any prefix `cmake --install`
  or the .deb filled): python/CMakeLists.txt alone, find_package(tensorbroker) of exactly this
  version; _core links that prefix's libtensorbroker_client.so.0 (run path <prefix>/lib unless
  it is a system directory) and the wheel carries no library: one copy shared with the C++
  programs, upgraded with the package.

The version is the one in ../CMakeLists.txt (project(tensorbroker VERSION ...)). pybind11: the
build environment's own when it has one (`import pybind11`: pip's, or Debian's python3-pybind11),
else the system's pybind11-dev, found by CMake.

Environment: TENSORBROKER_PREFIX (see above), TENSORBROKER_CMAKE_ARGS (extra -D settings, split
on spaces), TENSORBROKER_WHEEL_BUILD_DIR (CMake's build tree, kept; default: under setuptools'
build_temp; one per way), CMAKE_BUILD_PARALLEL_LEVEL.
"""

import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(\s*tensorbroker\s+VERSION\s+([0-9][0-9.]*)", text)
    if not match:
        raise RuntimeError(f"no project(tensorbroker VERSION ...) in {ROOT / 'CMakeLists.txt'}")
    return match.group(1)


def pybind11_cmake_dir():
    """The build environment's own pybind11 (pip's in the venv, or Debian's python3-pybind11), if
    it has one: CMake then takes it rather than the system's pybind11-dev (a newer one may be
    needed for a newer CPython). None: CMake finds the system's."""
    try:
        import pybind11
    except ImportError:
        return None
    return pybind11.get_cmake_dir()


class CMakeBuild(build_ext):
    """Configures CMake for this interpreter and builds only the extension's target."""

    # What a bundled wheel carries beside _core, from the build tree (the files their sonames name).
    LIBRARIES = ["client/libtensorbroker_client.so.0", "proto/libtensorbroker_proto.so.0"]

    def build_extension(self, ext):
        prefix = os.environ.get("TENSORBROKER_PREFIX", "")
        # $TENSORBROKER_WHEEL_BUILD_DIR keeps CMake's tree between builds (the tests use it).
        build = pathlib.Path(os.environ.get("TENSORBROKER_WHEEL_BUILD_DIR") or
                             pathlib.Path(self.build_temp) / ("cmake-installed" if prefix
                                                              else "cmake")).resolve()
        build.mkdir(parents=True, exist_ok=True)
        common = ["-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                  f"-DTENSORBROKER_PYTHON={sys.executable}"]
        pybind11_dir = pybind11_cmake_dir()
        if pybind11_dir:
            common.append(f"-Dpybind11_DIR={pybind11_dir}")
        if prefix:
            configure = ["cmake", "-S", str(HERE), *common,
                         f"-DCMAKE_PREFIX_PATH={pathlib.Path(prefix).resolve()}",
                         f"-DTENSORBROKER_VERSION={project_version()}"]
            libraries = []
        else:
            configure = ["cmake", "-S", str(ROOT), *common,
                         "-DTENSORBROKER_PYTHON_WHEEL=ON",
                         "-DTENSORBROKER_BUILD_TESTS=OFF",
                         "-DTENSORBROKER_BUILD_BENCH=OFF"]
            libraries = self.LIBRARIES
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        configure += shlex.split(os.environ.get("TENSORBROKER_CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "tensorbroker_python"],
                       check=True)
        package = pathlib.Path(self.get_ext_fullpath(ext.name)).parent
        package.mkdir(parents=True, exist_ok=True)
        built = build / "python" / "tensorbroker"
        cores = list(built.glob("_core*.so"))
        if len(cores) != 1:
            raise RuntimeError(f"expected one _core*.so in {built}, found {cores}")
        shutil.copyfile(cores[0], self.get_ext_fullpath(ext.name))
        shutil.copyfile(built / "_version.py", package / "_version.py")
        # pip builds in place: a bundled build before this one left its libraries in build_lib.
        for stale in package.glob("libtensorbroker_*.so*"):
            stale.unlink()
        for library in libraries:
            # copyfile follows the soname's link to the real file and names it by the soname.
            shutil.copyfile(build / library, package / pathlib.Path(library).name)


setup(
    version=project_version(),
    ext_modules=[Extension("tensorbroker._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
)
