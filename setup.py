"""Only the optional C row decoder; everything else is in pyproject.toml.

``optional=True``: without a C compiler or the Python headers the build prints a warning and
sparkcdc installs anyway, falling back to the pure-Python decoder (sparkcdc/mysql/binlog/fastdecode.py).
"""

from setuptools import Extension, setup

# the extension's C files, the module first; each part but the module has its header
_PARTS = ["decode", "loop", "step", "state", "rows", "cols", "stream", "payload", "jsondiff", "json", "jsontext", "double", "values"]

setup(
    ext_modules=[
        Extension(
            "sparkcdc.mysql.binlog._fastdecode",
            [f"sparkcdc/mysql/binlog/_fast{part}.c" for part in _PARTS],
            depends=[f"sparkcdc/mysql/binlog/_fast{part}.h" for part in _PARTS[1:]],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wno-missing-braces",
                                "-Werror=implicit-function-declaration"],
            optional=True,
        )
    ]
)
