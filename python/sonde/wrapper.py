"""The sonde wrapper kernel's kernel: SondeKernel (an IPython kernel) relays every request to the
kernel it wraps (sonde.wrapped) and runs sonde's magics itself (sonde.magics, the code of
`%load_ext sonde`). sonde.kernel installs and starts it; docs/jupyter.md describes it."""


import atexit
import collections
import json
import os
import shlex
import signal
import sys

from ipykernel.ipkernel import IPythonKernel
from IPython.core.magic import Magics, line_magic, magics_class
from traitlets import Unicode

from . import magics as sonde_magics
from .session import UsageError, export_session
from .kernel import KERNEL_NAME, install_spec
from .wrapped import KernelDied, WrappedKernel, exit_text

# The magics of `%load_ext sonde` that make no sense in another language's kernel: they record
# the cells into a Python script.
NOT_WRAPPED = set(sonde_magics.CONTROL_MAGICS)
# The requests besides execute that go to the wrapped kernel, and their replies.
RELAYED = {t + "_request": t + "_reply"
           for t in ("complete", "inspect", "history", "is_complete", "comm_info")}
WRAPPER_HELP = """sonde wrapper kernel: cells made only of these magics run here, the rest in the
wrapped kernel, whose process tree the monitor watches
  %list_kernels [PATHS]                              the kernels to wrap (PATHS: more kernelspec
                                                     directories, kept for %wrap_kernel)
  %wrap_kernel NAME [--save NEW]                     wrap NAME (--save NEW: a kernelspec for it)
DataFrames (perfdata_df, ...) are written as NAME.csv; %start_write_script is not available.
"""
DEAD_LINE = ("sonde: the wrapped kernel '{name}' (pid {pid}) died ({how}); the monitor's data is "
             "kept; the next cell starts it again")


def is_local_cell(code, local):
    """JUmPER's rule: every non-empty line a comment or a %magic of `local`, at least one."""
    found = False
    for ln in code.splitlines():
        s = ln.strip()
        if not s or s.startswith("#"):
            continue
        if s.startswith("%") and not s.startswith("%%") and len(s) > 1 and \
                s[1:].split(None, 1)[0] in local:
            found = True
            continue
        return False
    return found


def spec_manager():
    from jupyter_client.kernelspec import KernelSpecManager

    return KernelSpecManager()


class WrapperSondeMagics(sonde_magics.SondeMagics):
    """`%load_ext sonde`'s magics in the wrapper: the monitor watches the wrapped kernel, and a
    DataFrame (which the wrapped language cannot hold) is written as CSV instead."""

    def __init__(self, shell, kernel):
        super().__init__(shell)
        self.kernel = kernel

    def monitor_target(self):
        return self.kernel.wrapped_pid()

    def perfmonitor_help(self, line=""):
        print(WRAPPER_HELP)
        return super().perfmonitor_help(line)

    def _publish(self, name, df, what):
        if not name.isidentifier():
            raise UsageError(f"--name: '{name}' is not a Python identifier")
        path = f"{name}.csv"
        df.to_csv(path, index=False, na_rep="")
        print(f"sonde: {what} written to {path} (the wrapped kernel's language cannot hold a "
              f"pandas DataFrame; --file F.csv|F.json names the file)")


@magics_class
class WrapperMagics(Magics):
    """JUmPER's wrapper magics: %list_kernels [PATHS], %wrap_kernel NAME [--save NEW]."""

    def __init__(self, shell, kernel):
        super().__init__(shell)
        self.kernel = kernel

    @line_magic
    def list_kernels(self, line=""):
        try:
            print(self.kernel.list_kernels(shlex.split(line)), end="")
        except ValueError as e:
            print(f"sonde: error: %list_kernels: {e}", file=sys.stderr)

    @line_magic
    def wrap_kernel(self, line=""):
        try:
            argv = shlex.split(line)
        except ValueError as e:
            print(f"sonde: error: %wrap_kernel: {e}", file=sys.stderr)
            return
        name, save = None, None
        i = 0
        while i < len(argv):
            if argv[i] == "--save" and i + 1 < len(argv):
                save = argv[i + 1]
                i += 2
                continue
            if name is None:
                name = argv[i]
            i += 1
        self.kernel.wrap(name, save)


class SondeKernel(IPythonKernel):
    implementation = "sonde_wrapper_kernel"
    implementation_version = "1.0"
    banner = "sonde (wrapper): %list_kernels, %wrap_kernel NAME, then sonde's %perfmonitor_* magics"

    auto_wrap_kernel = Unicode("", config=True,
                               help="A kernel to wrap when the wrapper starts (--save, --wrap)")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.language_info = dict(self.language_info)
        self.ksm = spec_manager()
        self.wrapped = None
        self._parents = {}  # msg_id sent to the wrapped kernel -> the front end's request
        self._counts = {}  # msg_id of a relayed execute_request -> the wrapper's execution count
        self._comm_parents = collections.OrderedDict()  # the same for comm messages, the last
        self._exec_parent = None  # the front end's execute_request being relayed
        self._pending_lines = []  # said by the first cell (a restart of the wrapper)
        self._quiet_wrap = False  # the auto-wrap after a restart: the restart's line says it
        self._death_said = False  # a cell said that the wrapped kernel died
        self.magics = WrapperSondeMagics(self.shell, self)
        self.shell.register_magics(self.magics)
        self.shell.events.register("pre_run_cell", self.magics.pre_run_cell)
        self.shell.events.register("post_run_cell", self.magics.post_run_cell)
        self.shell.register_magics(WrapperMagics(self.shell, self))
        self.local_magics = ({"list_kernels", "wrap_kernel"} |
                             set(self.magics.magics["line"]) - NOT_WRAPPED)
        for t in ("comm_open", "comm_msg", "comm_close"):
            self.shell_handlers[t] = getattr(self, "_relay_" + t)
        for t in RELAYED:
            self.shell_handlers[t] = self._relay_or_local
        self._restore()
        # Terminated (the front end's last resort at a shutdown): the wrapped kernel, in a
        # session of its own, must not outlive the wrapper.
        signal.signal(signal.SIGTERM, self._on_sigterm)
        atexit.register(self._kill_wrapped)

    def _kill_wrapped(self):
        if self.wrapped is not None:
            self.wrapped.kill()

    def _on_sigterm(self, signum, frame):
        self._kill_wrapped()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    # Wrapped kernel -------------------------------------------------------------------------
    def wrapped_pid(self):
        if self.wrapped is None:
            raise UsageError("no kernel is wrapped yet: %wrap_kernel NAME first (%list_kernels "
                             "lists them)")
        if self.wrapped.returncode() is not None:
            self._start_again()
        return self.wrapped.pid

    def list_kernels(self, extra):
        added = []
        for raw in extra:
            path = os.path.expanduser(os.path.expandvars(raw))
            if not os.path.isdir(path):
                print(f"sonde: %list_kernels: ignoring '{raw}': not a directory", file=sys.stderr)
                continue
            if path not in self.ksm.kernel_dirs and path not in added:
                added.append(path)
        if added:  # kept for %wrap_kernel, as JUmPER's
            self.ksm.kernel_dirs = list(self.ksm.kernel_dirs) + added
        out = "Available Jupyter Kernels:\n" + "-" * 50 + "\n"
        for name, spec in sorted(self.ksm.get_all_specs().items()):
            s = spec.get("spec", {})
            out += f"  {name}: {s.get('display_name', name)} ({s.get('language', 'unknown')})\n"
        if added:
            out += "\n" + "-" * 50 + "\nAdded kernel search paths:\n"
            out += "".join(f"  {p}\n" for p in added)
        if self.wrapped is not None:
            out += "\n" + "-" * 50 + f"\nCurrently wrapped kernel: {self.wrapped.name}\n"
        return out

    def wrap(self, name, save=None, quiet=False):
        if not name:
            print("sonde: error: %wrap_kernel: give a kernel's name: %wrap_kernel NAME "
                  "[--save NEW] (%list_kernels lists them)", file=sys.stderr)
            return False
        specs = self.ksm.find_kernel_specs()
        if name not in specs:
            print(f"sonde: error: Kernel '{name}' not found. Use %list_kernels to see available "
                  "kernels.", file=sys.stderr)
            return False
        if name == KERNEL_NAME or self._is_wrapper_spec(name):
            print(f"sonde: error: '{name}' is a sonde wrapper kernel itself", file=sys.stderr)
            return False
        old = self.wrapped
        if old is not None:
            old.shutdown()
            self.wrapped = None
        w = WrappedKernel(name, self.ksm, cwd=os.getcwd(), on_iopub=self._relay_iopub)
        try:
            pid = w.start()
        except Exception as e:
            w.shutdown()
            print(f"sonde: error: Failed to start kernel '{name}': {e}", file=sys.stderr)
            return False
        self.wrapped = w
        self.language_info = dict(w.language_info) or self.language_info
        if not quiet:
            print(f"Successfully wrapped kernel: {name} (pid {pid}, "
                  f"{w.language_info.get('name', '?')})")
        self._follow(pid)
        if quiet:
            return True
        if save:
            path = install_spec(save, user=True, wrap=name,
                                display_name=f"{save} (sonde, wraps {name})",
                                language=self.ksm.get_kernel_spec(name).language)
            print(f"Created permanent kernel '{save}' that auto-wraps '{name}' ({path}).")
        else:
            print(f"Tip: Use '%wrap_kernel {name} --save <name>' to create a permanent kernel "
                  "that auto-wraps on startup.")
        return True

    def _is_wrapper_spec(self, name):
        try:
            argv = self.ksm.get_kernel_spec(name).argv
        except Exception:
            return False
        return "sonde.kernel" in argv

    def _follow(self, pid):
        """The running monitor (if any) watches `pid` from now on."""
        if self._follow_text(pid):
            print(f"sonde: the monitor follows the wrapped kernel (pid {pid}); its data so far "
                  "is kept")

    def _start_again(self):
        """The wrapped kernel died: started again, in one line (which says how it ended where
        no cell said it)."""
        w = self.wrapped
        old, code = w.pid, w.returncode()
        said, self._death_said = self._death_said, False
        pid = w.start()
        how = "" if said else f", it had ended: {exit_text(code)}"
        self._say(f"sonde: started the wrapped kernel '{w.name}' again (pid {pid}, was {old}"
                  f"{how})" + self._follow_text(pid))

    def _follow_text(self, pid):
        mon = self.magics.monitor
        if mon is not None and mon.running and mon.pid != pid:
            mon.retarget(pid)
            return "; the monitor follows it, its data is kept"
        return ""

    def _say(self, text, name="stderr", parent=None):
        """One line into the cell being run (or `parent`'s), at once."""
        sys.stdout.flush()
        sys.stderr.flush()
        self.session.send(self.iopub_socket, "stream", {"name": name, "text": text + "\n"},
                          parent=parent or self._exec_parent or self.get_parent("shell"),
                          ident=self._topic("stream"))

    # Execution ------------------------------------------------------------------------------
    async def do_execute(self, code, silent, store_history=True, user_expressions=None,
                         allow_stdin=False, *, cell_id=None):
        if self.auto_wrap_kernel and self.wrapped is None:
            name, self.auto_wrap_kernel = self.auto_wrap_kernel, ""
            self.wrap(name, quiet=self._quiet_wrap)
        for line in self._pending_lines:
            self._say(line)
        self._pending_lines = []
        if is_local_cell(code, self.local_magics) or (self.wrapped is None and
                                                       not code.strip()):
            return await super().do_execute(code, silent, store_history, user_expressions,
                                            allow_stdin, cell_id=cell_id)
        return self._forward_execute(code, silent, store_history, user_expressions or {},
                                     allow_stdin)

    def _error_reply(self, ename, evalue, count):
        return {"status": "error", "ename": ename, "evalue": evalue, "traceback": [],
                "execution_count": count}

    def _forward_execute(self, code, silent, store_history, user_expressions, allow_stdin):
        count = self.shell.execution_count
        if store_history:
            self.shell.execution_count += 1
        w = self.wrapped
        if w is None:
            self._say("sonde: no kernel is wrapped: %wrap_kernel NAME first (%list_kernels "
                      "lists them); this cell was not run")
            return self._error_reply("NoWrappedKernel", "no kernel is wrapped", count)
        parent = self.get_parent("shell")
        self._exec_parent = parent
        try:
            if w.returncode() is not None:
                self._start_again()
            cell = not silent  # a front end's silent request is not a cell of the history
            if cell:
                self.magics.on_pre_run_cell(code, self.magics.called_line_magics(code), False)
            msg_id = w.request("execute_request", {
                "code": code, "silent": silent, "store_history": store_history,
                "user_expressions": user_expressions, "allow_stdin": allow_stdin,
                "stop_on_error": True})
            self._parents[msg_id] = parent
            self._counts[msg_id] = count
            try:
                reply = self._wait(w, msg_id)
            except KernelDied as e:
                if cell:
                    self.magics.on_post_run_cell(count)
                self._say(DEAD_LINE.format(name=w.name, pid=w.pid, how=e))
                self._death_said = True
                return self._error_reply("DeadKernelError",
                                         f"the wrapped kernel '{w.name}' died ({e})", count)
            finally:
                self._parents.pop(msg_id, None)
                self._counts.pop(msg_id, None)
            content = dict(reply["content"])
            content["execution_count"] = count
            # After the outputs: the per-cell report of `%perfmonitor_enable_perfreports`.
            if cell:
                self.magics.on_post_run_cell(count)
            return content
        except Exception as e:  # a start that failed: the cell's error, the kernel goes on
            self._say(f"sonde: error: the wrapped kernel '{w.name}': {e}")
            return self._error_reply(type(e).__name__, str(e), count)
        finally:
            self._exec_parent = None

    def _wait(self, w, msg_id):
        def on_input(msg):
            c = msg["content"]
            try:
                return self._input_request(str(c.get("prompt", "")), self._parent_ident["shell"],
                                           self.get_parent("shell"),
                                           password=bool(c.get("password")))
            except Exception:  # the front end has no stdin, or it was interrupted
                return ""

        while True:
            try:
                return w.wait(msg_id, on_input=on_input)
            except KeyboardInterrupt:  # SIGINT to the wrapper (interrupt_mode signal)
                self._interrupt_wrapped()

    def _relay_iopub(self, msg):
        """A message of the wrapped kernel's iopub to the front end, as the reply to the front
        end's request (on the wrapped kernel's iopub thread)."""
        t = msg["msg_type"]
        if t in ("status", "execute_input"):
            return  # the wrapper sends its own for the front end's request
        content = dict(msg["content"])
        pid = msg["parent_header"].get("msg_id")
        count = self._counts.get(pid)
        if count is not None and "execution_count" in content:
            content["execution_count"] = count
        parent = (self._parents.get(pid) or self._comm_parents.get(pid) or self._exec_parent
                  or self.get_parent("shell"))
        self.session.send(self.iopub_socket, t, content, parent=parent,
                          metadata=msg.get("metadata") or {}, buffers=msg.get("buffers"),
                          ident=self._topic(t))

    def _interrupt_wrapped(self):
        w = self.wrapped
        if w is not None and w.interrupt():
            self._say(f"sonde: interrupt passed to the wrapped kernel '{w.name}' "
                      f"(pid {w.pid}, {w.interrupt_mode}); the monitor goes on")

    async def interrupt_request(self, stream, ident, parent):
        if self.wrapped is not None and self._exec_parent is not None:
            self._interrupt_wrapped()
        else:
            self._send_interupt_children()
        self.session.send(stream, "interrupt_reply", {"status": "ok"}, parent, ident=ident)

    # Other requests -------------------------------------------------------------------------
    async def _relay_or_local(self, stream, ident, parent):
        """A request other than execute: to the wrapped kernel, or answered here when no kernel
        is wrapped (or it does not answer), or when it is about the wrapper's own magics."""
        t = parent["header"]["msg_type"]
        code = parent["content"].get("code", "")
        local = (t == "complete_request" and code.lstrip().startswith("%")) or \
            (t == "is_complete_request" and is_local_cell(code, self.local_magics))
        if local or not self._relay_request(stream, ident, parent, RELAYED[t]):
            await getattr(super(), t)(stream, ident, parent)

    def _relay_request(self, stream, ident, parent, reply_type):
        """Whether the wrapped kernel answered (its reply then went to the front end)."""
        w = self.wrapped
        if w is None or w.returncode() is not None:
            return False
        msg_id = w.request(parent["header"]["msg_type"], parent["content"])
        self._parents[msg_id] = parent
        try:
            reply = w.wait(msg_id, until_idle=False, timeout=10)
        except (KernelDied, TimeoutError):
            return False
        finally:
            self._parents.pop(msg_id, None)
        self.session.send(stream, reply_type, reply["content"], parent, ident)
        return True

    # Comms: the wrapper's own (its plot widget) stay here, the rest go to the wrapped kernel.
    def _comm_is_local(self, comm_id):
        return comm_id in self.comm_manager.comms or self.wrapped is None

    def _send_comm(self, parent):
        w = self.wrapped
        if w is None or w.returncode() is not None:
            return
        msg_id = w.send(parent["header"]["msg_type"], parent["content"], parent.get("metadata"))
        self._comm_parents[msg_id] = parent  # the outputs of a comm message go to its cell
        while len(self._comm_parents) > 1000:
            self._comm_parents.popitem(last=False)

    def _relay_comm_open(self, stream, ident, parent):
        """A comm the front end opens belongs to the wrapped kernel (where one is wrapped)."""
        if self.wrapped is None:
            return self.comm_manager.comm_open(stream, ident, parent)
        self._send_comm(parent)

    def _relay_comm_msg(self, stream, ident, parent):
        if self._comm_is_local(parent["content"].get("comm_id")):
            return self.comm_manager.comm_msg(stream, ident, parent)
        self._send_comm(parent)

    def _relay_comm_close(self, stream, ident, parent):
        if self._comm_is_local(parent["content"].get("comm_id")):
            return self.comm_manager.comm_close(stream, ident, parent)
        self._send_comm(parent)

    # Shutdown and restart -------------------------------------------------------------------
    def do_shutdown(self, restart):
        w = self.wrapped
        if restart and w is not None:
            self._save_for_restart(w.name)
        mon = self.magics.monitor
        if mon is not None:
            mon.stop()
        if w is not None:
            w.shutdown()
            self.wrapped = None
        return super().do_shutdown(restart)

    def _state_dir(self):
        """Where a restart's state lives: next to the connection file, named after it (a
        restart keeps the connection file)."""
        from jupyter_core.paths import jupyter_runtime_dir

        conn = getattr(self.parent, "connection_file", "") if self.parent else ""
        if not conn:
            return None
        stem = os.path.splitext(os.path.basename(conn))[0]
        return os.path.join(jupyter_runtime_dir(), f"sonde-{stem}")

    def _save_for_restart(self, name):
        d = self._state_dir()
        if d is None:
            return
        os.makedirs(d, mode=0o700, exist_ok=True)
        state = {"wrapped": name, "session": None, "cells": len(self.magics.history)}
        if self.magics.data is not None:
            # One directory per restart: the sessions of earlier restarts stay.
            n = len([e for e in os.listdir(d) if e.startswith("session-")]) + 1
            try:
                state["session"] = export_session(self.magics.data, self.magics.history,
                                                  os.path.join(d, f"session-{n}"))
            except Exception as e:  # the restart goes on; the next wrapper says why
                state["error"] = str(e)
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump(state, f)

    def _restore(self):
        d = self._state_dir()
        path = d and os.path.join(d, "state.json")
        if not path or not os.path.isfile(path):
            return
        try:
            with open(path) as f:
                state = json.load(f)
        except (OSError, ValueError):
            return
        os.unlink(path)
        if state.get("wrapped") and not self.auto_wrap_kernel:
            self.auto_wrap_kernel = state["wrapped"]
            self._quiet_wrap = True
        line = f"sonde: the kernel restarted; '{state.get('wrapped')}' is wrapped again"
        if state.get("session"):
            line += (f"; the monitor's data of the session before ({state.get('cells', 0)} "
                     f"cells) is kept in {state['session']} (%import_session "
                     f"{state['session']} reads it)")
        elif state.get("error"):
            line += f"; the session before could not be saved: {state['error']}"
        self._pending_lines.append(line)
