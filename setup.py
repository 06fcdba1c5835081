"""Only the optional C row decoder; everything else is in pyproject.toml.

``optional=True``: without a C compiler or the Python headers the build prints a warning and
sparkcdc installs anyway, falling back to the pure-Python decoder (sparkcdc/mysql/binlog/fastdecode.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "sparkcdc.mysql.binlog._fastdecode",
            ["sparkcdc/mysql/binlog/_fastdecode.c", "sparkcdc/mysql/binlog/_fastjson.c",
             "sparkcdc/mysql/binlog/_fastpayload.c"],
            depends=["sparkcdc/mysql/binlog/_fastdecode.h"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wno-missing-braces"],
            optional=True,
        )
    ]
)
