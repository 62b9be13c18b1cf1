"""A kernel started and spoken to by the sonde wrapper kernel (sonde.kernel).

jupyter_client's KernelManager starts it from its kernelspec (its own session and process group);
its channels are plain synchronous zmq sockets of this module, signed with jupyter_client's
Session, so that the wrapper kernel's event loop never runs a second one. Every call of
KernelManager (which runs coroutines to completion) is made on one worker thread of its own.
iopub is read by a thread of its own, all the time (outputs between requests too: threads,
widgets, comms), which passes each message on (on_iopub) and tells wait() when a request's idle
status has come, after its outputs.
"""

import concurrent.futures
import os
import signal
import sys
import threading
import time

import zmq
from jupyter_client.session import Session

CHANNELS = ("shell", "iopub", "stdin", "control")
SHUTDOWN_WAIT_S = 1.0


class KernelDied(Exception):
    """The wrapped kernel's process ended while a reply was awaited."""


def exit_text(code):
    """`exit status 1`, `killed by signal 9 (SIGKILL)` from Popen.returncode."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "?"
        return f"killed by signal {-code} ({name})"
    return f"exit status {code}"


def original_streams():
    """The wrapper's own stdout and stderr as they were before ipykernel sent them to the
    notebook (its OutStream keeps a copy of each fd): the wrapped kernel writes there, as it
    would started by itself (the server's log), not into the cells."""
    out = {}
    for name in ("stdout", "stderr"):
        fd = getattr(getattr(sys, name, None), "_original_stdstream_copy", None)
        if isinstance(fd, int):
            out[name] = fd
    return out


class WrappedKernel:
    """One running kernel of a kernelspec: start(), request(), wait(), interrupt(), shutdown().

    on_iopub(msg) gets every iopub message (on the iopub thread); wait() passes input requests
    to on_input(msg), which returns the text to send back.
    """

    def __init__(self, name, spec_manager, cwd=None, on_iopub=None):
        self.name = name
        self.spec_manager = spec_manager
        self.cwd = cwd
        self.on_iopub = on_iopub
        self.km = None
        self.ctx = zmq.Context()
        self.sockets = {}
        self.session = None
        self.kernel_info = {}
        self._idle = {}  # msg_id -> Event: set when iopub said idle for it
        self._iopub_thread = None
        self._iopub_stop = threading.Event()
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sonde-km")

    def _km_call(self, fn, *args, **kwargs):
        return self._pool.submit(fn, *args, **kwargs).result()

    # Life -----------------------------------------------------------------------------------
    def start(self, timeout=60.0):
        """Starts the kernel (again, after it died) and waits until it answers kernel_info."""
        from jupyter_client import KernelManager

        self._close_sockets()
        if self.km is not None:
            try:
                self._km_call(self.km.cleanup_resources)
            except Exception:  # pragma: no cover - the files of a dead kernel
                pass
        self.km = KernelManager(kernel_name=self.name, kernel_spec_manager=self.spec_manager)
        # A shutdown waits SHUTDOWN_WAIT_S / 2 for the kernel to end, then terminates it: the
        # wrapper's own front end terminates the wrapper 2.5 s after its shutdown_request.
        self.km.shutdown_wait_time = SHUTDOWN_WAIT_S
        kwargs = {"cwd": self.cwd} if self.cwd else {}
        kwargs.update(original_streams())
        self._km_call(self.km.start_kernel, **kwargs)
        info = self.km.get_connection_info(session=False)
        self.session = Session(key=info["key"], signature_scheme=info["signature_scheme"],
                               username="sonde")
        for ch in CHANNELS:
            kind = zmq.SUB if ch == "iopub" else zmq.DEALER
            sock = self.ctx.socket(kind)
            sock.linger = 0
            if kind == zmq.SUB:
                sock.setsockopt(zmq.SUBSCRIBE, b"")
            else:
                # One identity for shell and stdin, as jupyter_client's: a kernel's stdin
                # (ROUTER) addresses an input request to the identity of the shell request.
                sock.setsockopt(zmq.IDENTITY, self.session.bsession)
            sock.connect(f"{info['transport']}://{info['ip']}:{info[ch + '_port']}")
            self.sockets[ch] = sock
        self._iopub_stop = threading.Event()
        self._iopub_thread = threading.Thread(
            target=self._iopub_loop, args=(self.sockets.pop("iopub"), self._iopub_stop),
            name="sonde-iopub", daemon=True)
        self._iopub_thread.start()
        self._wait_ready(timeout)
        return self.pid

    def _wait_ready(self, timeout):
        """kernel_info until the shell replies and iopub has delivered its idle status (so the
        subscription is live: no output of the first cell is lost)."""
        deadline = time.monotonic() + timeout
        while True:
            msg_id = self.request("kernel_info_request", {})
            try:
                reply = self.wait(msg_id, timeout=1.0)
                self.kernel_info = reply["content"]
                return
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the kernel '{self.name}' did not answer within "
                                       f"{timeout:g} s") from None

    def _iopub_loop(self, sock, stop):
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        try:
            while not stop.is_set():
                if not poller.poll(100):
                    continue
                while True:
                    try:
                        _, msg = self.session.recv(sock, mode=zmq.NOBLOCK)
                    except zmq.ZMQError:
                        break
                    if msg is None:
                        break
                    self._on_iopub(msg)
        finally:
            sock.close(0)

    def _on_iopub(self, msg):
        if self.on_iopub is not None:
            try:
                self.on_iopub(msg)
            except Exception:  # a message the front end cannot take: not the relay's end
                pass
        if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
            ev = self._idle.get(msg["parent_header"].get("msg_id"))
            if ev is not None:
                ev.set()

    @property
    def process(self):
        prov = getattr(self.km, "provisioner", None)
        return getattr(prov, "process", None)

    @property
    def pid(self):
        p = self.process
        return p.pid if p is not None else None

    def returncode(self):
        """None while the kernel runs, else Popen's returncode (reaped here)."""
        p = self.process
        return None if p is None else p.poll()

    def check_alive(self):
        code = self.returncode()
        if code is not None:
            raise KernelDied(exit_text(code))

    @property
    def language_info(self):
        return self.kernel_info.get("language_info") or {}

    @property
    def interrupt_mode(self):
        spec = getattr(self.km, "kernel_spec", None)
        return getattr(spec, "interrupt_mode", "signal") or "signal"

    def interrupt(self):
        """As jupyter_client's interrupt_kernel: SIGINT to the kernel's process group, or an
        interrupt_request on the control channel when its kernelspec says `message`."""
        if self.returncode() is not None:
            return False
        if self.interrupt_mode == "message":
            self.session.send(self.sockets["control"], "interrupt_request", {})
            return True
        pid = self.pid
        try:
            pgid = os.getpgid(pid)
            if pgid == pid:
                os.killpg(pgid, signal.SIGINT)
            else:
                os.kill(pid, signal.SIGINT)
        except ProcessLookupError:
            return False
        return True

    def kill(self):
        """SIGKILL to the kernel's process group (the wrapper is being terminated)."""
        pid = self.pid
        if pid is None or self.returncode() is not None:
            return
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def shutdown(self):
        if self.km is None:
            return
        try:
            if self.returncode() is None:
                self._km_call(self.km.shutdown_kernel, now=False)
            else:
                self._km_call(self.km.cleanup_resources)
        except Exception:
            try:
                self._km_call(self.km.shutdown_kernel, now=True)
            except Exception:
                pass
        self._close_sockets()
        self._pool.shutdown(wait=False)

    def _close_sockets(self):
        if self._iopub_thread is not None:
            self._iopub_stop.set()
            self._iopub_thread.join(5)
            self._iopub_thread = None
        for sock in self.sockets.values():
            sock.close(0)
        self.sockets = {}

    # Messages --------------------------------------------------------------------------------
    def request(self, msg_type, content, channel="shell", metadata=None):
        """Sends a request that wait() can wait for; returns its msg_id."""
        msg = self.session.msg(msg_type, content, metadata=metadata)
        msg_id = msg["header"]["msg_id"]
        self._idle[msg_id] = threading.Event()  # before it is sent: its idle may come at once
        self.session.send(self.sockets[channel], msg)
        return msg_id

    def send(self, msg_type, content, metadata=None):
        """A front end's message passed on, no reply awaited (comm_open, comm_msg, …); returns
        its msg_id."""
        msg = self.session.msg(msg_type, content, metadata=metadata)
        self.session.send(self.sockets["shell"], msg)
        return msg["header"]["msg_id"]

    def reply_input(self, value, parent):
        self.session.send(self.sockets["stdin"], "input_reply", {"value": value}, parent=parent)

    def wait(self, msg_id, on_input=None, until_idle=True, timeout=None):
        """The reply to `msg_id`, once iopub said idle for it (every output of the request has
        then gone to on_iopub). Raises KernelDied when the process ends first, TimeoutError
        after `timeout` s. Shell and stdin are read here, by the caller's thread."""
        idle = self._idle.get(msg_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        poller = zmq.Poller()
        for ch in ("shell", "stdin"):
            poller.register(self.sockets[ch], zmq.POLLIN)
        reply = None
        try:
            while True:
                for sock, _ in poller.poll(100):
                    _, msg = self.session.recv(sock, mode=zmq.NOBLOCK)
                    if msg is None:
                        continue
                    if sock is self.sockets["shell"]:
                        if msg["parent_header"].get("msg_id") == msg_id:
                            reply = msg
                    elif msg["msg_type"] == "input_request":
                        value = on_input(msg) if on_input is not None else ""
                        self.reply_input(value, msg["header"])
                if reply is not None and (not until_idle or idle is None or
                                          idle.wait(0.5 if self.returncode() is None else 0)):
                    return reply
                self.check_alive()
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"no reply from the kernel '{self.name}' within "
                                       f"{timeout:g} s")
        finally:
            self._idle.pop(msg_id, None)
