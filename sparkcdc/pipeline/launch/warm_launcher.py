"""The interpreter Spark runs for a local run's Python processes, when warm workers are on
(pipeline/launch/warm_python.py): a stand-in that asks the run's warm interpreter to fork the
process Spark wanted, and then stands for it.

Why a stand-in: Spark starts each Python process as ``<python> -m <module>`` and holds on
to what it started (its pid, its exit, a SIGTERM to stop it). This file is that
``<python>``: run by path with ``python -S`` it starts in milliseconds, imports nothing
but the standard library (never sparkcdc or pyspark), hands its standard streams, its
environment, its folder and its arguments to the warm interpreter over a Unix socket,
passes on the signals it gets to the forked process and ends with that process's exit
status. Anything it cannot hand over (other options than ``-m``, no warm interpreter
listening, one that is gone) it runs as it would have run: it becomes the real
interpreter (``exec``) with the same arguments, so a warm start is only ever faster.

Usage (the script ``warm_python`` writes), with the warm interpreter's socket name in
``SPARKCDC_WARM_SOCKET``::

    <python> -S warm_launcher.py <python> <arg>...
"""

import json
import os
import signal
import socket
import struct
import sys
import time

SOCKET_ENV = "SPARKCDC_WARM_SOCKET"  # warm_python.SOCKET_ENV: the warm interpreter's name
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)


def _recv_exact(sock, n):
    data = b""
    while len(data) < n:
        part = sock.recv(n - len(data))
        if not part:
            return None
        data += part
    return data


def _run_real(python, args):
    """Become the real interpreter with the same arguments (never returns)."""
    os.execv(python, [python, *args])


def _hand_over(path, args):
    """The pid of the forked process and the connection its exit comes on, or None when
    there is no warm interpreter to fork it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        request = json.dumps({"argv": args, "env": dict(os.environ),
                              "cwd": os.getcwd()}).encode()
        socket.send_fds(sock, [struct.pack("!I", len(request))], [0, 1, 2])
        sock.sendall(request)
        reply = _recv_exact(sock, 4)
    except OSError:
        reply = None
    if reply is None:
        sock.close()
        return None
    pid = struct.unpack("!i", reply)[0]
    if pid <= 0:
        sock.close()
        return None
    return pid, sock


def _stand_for(pid, sock):
    """Pass signals on to ``pid`` and end as it ends."""
    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)
    status = _recv_exact(sock, 4)  # a signal's handler runs, and the wait goes on
    if status is None:  # the warm interpreter is gone: wait for the process itself
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                sys.exit(1)
            time.sleep(0.1)
    code = struct.unpack("!i", status)[0]
    if code < 0:  # ended by a signal: end by the same one
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        sys.exit(128 - code)
    sys.exit(code)


def main(argv):
    python, args = argv[0], argv[1:]
    name = os.environ.get(SOCKET_ENV)
    if not name or len(args) < 2 or args[0] != "-m" or not args[1]:
        _run_real(python, args)
    handed = _hand_over("\0" + name, args[1:])
    if handed is None:
        _run_real(python, args)
    _stand_for(*handed)


if __name__ == "__main__":
    main(sys.argv[1:])
