"""Serves one Python collector over sonde's plugin protocol (docs/plugin-protocol.md).

    python -m sonde_plugin.runner pkg.module.Class

sonde starts this once per collector entry ``_target_: python:pkg.module.Class`` and keeps it
running. Requests arrive as JSON lines on stdin, replies leave as JSON lines on stdout. Anything
the collector prints goes to stderr, which sonde passes on prefixed with the collector's name. An
exception in the collector's code becomes an error for that tick (its type and message); the
traceback is printed only with SONDE_PLUGIN_DEBUG=1.
"""

import importlib
import inspect
import json
import numbers
import os
import sys
import traceback

from sonde_plugin.backend import CollectorBackend
from sonde_plugin.context import CollectionContext, NodeInfo, pids_from_wire

DEBUG = os.environ.get("SONDE_PLUGIN_DEBUG") == "1"


class SetupError(Exception):
    """A setup problem reported to sonde as is."""


def describe(exc, where):
    """'ValueError: bad input' (+ the traceback on stderr when debugging)."""
    if DEBUG:
        sys.stderr.write("{} raised:\n{}".format(where, traceback.format_exc()))
        sys.stderr.flush()
    text = str(exc)
    return "{}: {}".format(type(exc).__name__, text) if text else type(exc).__name__


def to_wire(value, depth=0):
    """A collect() result as JSON text: a number, a list of numbers (None: not measured), a list
    of such lists, or null. Raises TypeError/ValueError for anything else, NaN and infinities.
    Written by hand: this is the per-tick path, and float repr is valid JSON."""
    kind = type(value)
    if kind is float:
        if value - value != 0.0:  # NaN or an infinity
            raise ValueError("collect returned {}; expected a finite number".format(value))
        return repr(value)
    if kind is int:
        return repr(value)
    if kind is list or kind is tuple:
        if depth >= 2:
            raise TypeError("collect returned lists nested too deep; expected a list of lists of "
                            "numbers at most")
        return "[" + ",".join([to_wire(item, depth + 1) for item in value]) + "]"
    if value is None:
        return "null"
    if kind is bool:
        raise TypeError("collect returned a bool; expected a number or a list of numbers")
    # Other number types (numpy, Decimal, Fraction) and array-likes.
    if isinstance(value, numbers.Integral):
        return repr(int(value))
    if isinstance(value, numbers.Real):
        return to_wire(float(value), depth)
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return to_wire(value.tolist(), depth)
    raise TypeError("collect returned {}; expected a number or a list of numbers".format(
        kind.__name__))


def load_class(target):
    module_name, _, class_name = target.rpartition(".")
    if not module_name:
        raise SetupError("'{}' is not MODULE.CLASS".format(target))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the plugin's
        raise SetupError("cannot import module '{}': {}".format(
            module_name, describe(exc, "import " + module_name))) from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise SetupError("module '{}' ({}) has no attribute '{}'".format(
            module_name, getattr(module, "__file__", "?"), class_name))
    if not callable(cls) or not callable(getattr(cls, "collect", None)):
        raise SetupError("'{}' is not a collector class (it needs a collect(level, context) "
                         "method)".format(target))
    return cls


def injected_values(inject):
    """The inject: values as the constructor gets them."""
    out = {}
    for key, value in (inject or {}).items():
        if key == "node_info":
            out[key] = NodeInfo(value) if value is not None else None
        elif key == "process":
            # JUmPER passes a psutil.Process; give one when psutil is there, else the pid.
            try:
                import psutil  # pylint: disable=import-outside-toplevel
                out[key] = psutil.Process(value) if value is not None else None
            except Exception:  # noqa: BLE001 - no psutil, or the process is gone
                out[key] = value
        else:
            out[key] = value
    return out


def check_signature(cls, kwargs, injected):
    """Raises SetupError naming the keyword arguments the constructor does not accept."""
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        return  # no signature to check (a builtin): let the call tell
    params = sig.parameters.values()
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return
    accepted = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    unknown = sorted(k for k in kwargs if k not in accepted)
    missing_inject = sorted(k for k in injected if k not in accepted)
    problems = []
    if unknown:
        problems.append("unknown keyword argument{} {}".format(
            "s" if len(unknown) > 1 else "", ", ".join(repr(k) for k in unknown)))
    if missing_inject:
        problems.append("injected value{} {} (inject:) not accepted".format(
            "s" if len(missing_inject) > 1 else "", ", ".join(repr(k) for k in missing_inject)))
    if problems:
        raise SetupError("{}.__init__ does not take {} (it takes: {})".format(
            cls.__name__, "; ".join(problems), ", ".join(sorted(accepted)) or "nothing"))


class Server:
    """The state of one served collector."""

    def __init__(self, target):
        self.target = target
        self.collector = None
        self.node_info = None
        self.interval = None
        self.snapshot = None
        self.pid = self.uid = self.slurm_job = None

    def setup(self, msg):
        try:
            cls = load_class(self.target)
            kwargs = msg.get("kwargs") or {}
            injected = injected_values(msg.get("inject"))
            both = sorted(set(kwargs) & set(injected))
            if both:
                raise SetupError("{} given both as keyword argument and in inject:".format(
                    ", ".join(both)))
            check_signature(cls, kwargs, injected)
            try:
                self.collector = cls(**kwargs, **injected)
            except Exception as exc:  # noqa: BLE001
                raise SetupError("{}(): {}".format(cls.__name__, describe(exc, "__init__"))) \
                    from None
            metadata = None
            setup = getattr(self.collector, "setup", None)
            if callable(setup):
                try:
                    metadata = setup()
                except Exception as exc:  # noqa: BLE001
                    raise SetupError("setup(): " + describe(exc, "setup")) from None
            devices = {}
            devices_of = getattr(self.collector, "devices", None)
            for level in msg.get("levels") or ():
                try:
                    n = devices_of(level) if callable(devices_of) else 1
                except Exception as exc:  # noqa: BLE001
                    raise SetupError("devices({!r}): {}".format(level, describe(exc, "devices"))) \
                        from None
                if n is None:
                    continue
                if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
                    raise SetupError("devices({!r}) returned {!r}; expected a non-negative integer "
                                     "or None".format(level, n))
                devices[level] = int(n)
        except SetupError as exc:
            return {"ok": False, "error": str(exc)}
        self.node_info = injected.get("node_info")
        # The base class's snapshot does nothing: skip the call on the per-tick path.
        snapshot = getattr(self.collector, "snapshot", None)
        overridden = getattr(type(self.collector), "snapshot", None) is not CollectorBackend.snapshot
        self.snapshot = snapshot if callable(snapshot) and overridden else None
        target_info = msg.get("target") or {}
        self.pid = target_info.get("pid")
        self.uid = target_info.get("uid")
        self.slurm_job = target_info.get("slurm_job")
        self.interval = msg.get("interval")
        reply = {"ok": True, "devices": devices,
                 "context": bool(getattr(self.collector, "wants_context", False)),
                 "priority": int(getattr(self.collector, "priority", 0) or 0)}
        if metadata is not None:
            reply["metadata"] = metadata
        return reply

    def tick(self, msg):
        """The reply to a tick request, as a dict (errors) or as ready JSON bytes."""
        n = msg["tick"]
        collector = self.collector
        if collector is None:
            return {"ok": False, "tick": n, "error": "tick before a successful setup"}
        levels = msg["levels"]
        context = CollectionContext(n, msg["time"], msg["wallclock"], msg["dt"], levels, None, None,
                                    self.node_info, self.pid, self.uid, self.slurm_job,
                                    self.interval)
        raw_context = msg.get("context")
        if raw_context is not None:
            context.pids, context.total_pids = pids_from_wire(raw_context)
        if self.snapshot is not None:
            try:
                self.snapshot(context)
            except Exception as exc:  # noqa: BLE001
                return {"ok": False, "tick": n, "error": "snapshot: " + describe(exc, "snapshot")}
        collect = collector.collect
        parts = []
        for level in levels:
            try:
                text = to_wire(collect(level, context))
            except Exception as exc:  # noqa: BLE001
                text = '{"error":' + json.dumps(describe(exc, "collect({!r})".format(level))) + "}"
            parts.append('"%s":%s' % (level, text))  # level names are plain words
        return ('{"ok":true,"tick":%d,"values":{%s}}\n' % (n, ",".join(parts))).encode()

    def shutdown(self):
        teardown = getattr(self.collector, "teardown", None)
        if callable(teardown):
            try:
                teardown()
            except Exception as exc:  # noqa: BLE001
                sys.stderr.write("teardown: {}\n".format(describe(exc, "teardown")))


def take_protocol_fds():
    """Keeps the real stdin/stdout for the protocol; the collector's own reads get /dev/null and
    its prints go to stderr (sonde shows them), so they cannot break the protocol."""
    proto_in = os.fdopen(os.dup(0), "rb", buffering=1 << 16)
    proto_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    return proto_in, proto_out


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def encode(reply):
    if type(reply) is bytes:
        return reply
    try:
        return json.dumps(reply, separators=(",", ":"), allow_nan=False).encode() + b"\n"
    except (TypeError, ValueError) as exc:  # e.g. metadata that is not JSON
        return json.dumps({"ok": False, "tick": reply.get("tick"),
                           "error": "reply not representable as JSON: " + str(exc)}).encode() \
            + b"\n"


decode = json.JSONDecoder().decode


def serve(target, proto_in, proto_out):
    server = Server(target)
    readline = proto_in.readline
    write = os.write
    while True:
        line = readline()
        if not line:
            break
        try:
            msg = decode(line.decode())
            op = msg["op"]
        except (ValueError, TypeError, KeyError, UnicodeDecodeError):
            if line.strip():
                write_all(proto_out, encode({"ok": False, "error": "malformed request"}))
            continue
        try:
            if op == "tick":
                reply = server.tick(msg)
            elif op == "setup":
                reply = server.setup(msg)
            elif op == "shutdown":
                break
            else:
                reply = {"ok": False, "error": "unknown op {!r}".format(op)}
        except Exception as exc:  # noqa: BLE001 - a malformed request, never the end
            reply = {"ok": False, "tick": msg.get("tick"),
                     "error": "bad {} request: {}".format(op, describe(exc, op))}
        if type(reply) is not bytes:
            reply = encode(reply)
        written = write(proto_out, reply)
        if written < len(reply):  # a large reply on a full pipe
            write_all(proto_out, reply[written:])
    server.shutdown()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: python -m sonde_plugin.runner pkg.module.Class\n")
        return 2
    proto_in, proto_out = take_protocol_fds()
    try:
        serve(argv[0], proto_in, proto_out)
    except BrokenPipeError:
        pass  # sonde went away
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
