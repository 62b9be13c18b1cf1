"""Where things are: the repository, the bench directory and the benchmark build."""
import os

# This file is bench/benchlib/paths.py.
BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(BENCH)
BUILD = os.path.join(ROOT, "build-bench")
BUILD_C = os.path.join(BUILD, "bench-c")
RESULTS = os.path.join(BENCH, "results")


# The layers' static libraries (CMakeLists.txt), users before what they use, as a linker wants
# them. A build from before the split has libsonde_core.a alone.
LAYERS = ["sonde_cli", "sonde_views", "sonde_collectors", "sonde_plugins", "sonde_sinks",
          "sonde_gpu", "sonde_http", "sonde_core"]


def sonde_libs(build_dir):
    """The static libraries of a sonde build directory, in link order."""
    libs = [os.path.join(build_dir, "lib%s.a" % name) for name in LAYERS]
    return [lib for lib in libs if os.path.exists(lib)]
