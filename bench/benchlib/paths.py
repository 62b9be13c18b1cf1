"""Where things are: the repository, the bench directory and the benchmark build."""
import os

# This file is bench/benchlib/paths.py.
BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(BENCH)
BUILD = os.path.join(ROOT, "build-bench")
BUILD_C = os.path.join(BUILD, "bench-c")
RESULTS = os.path.join(BENCH, "results")
