"""The sonde wrapper kernel: any Jupyter kernel (R, Julia, another Python) with sonde's magics.

    python3 -m sonde.kernel install [--user | --sys-prefix | --prefix DIR] [--name NAME]
    python3 -m sonde.kernel uninstall [--name NAME]

installs the kernelspec `sonde` ("sonde (wrapper)"). In a notebook on it:

    %list_kernels [PATHS]          the kernels it can wrap (PATHS: more kernelspec directories)
    %wrap_kernel NAME [--save NEW] start NAME; every other cell runs there (--save: a kernelspec
                                   NEW that wraps NAME when it starts)
    %perfmonitor_start ...         every magic of `%load_ext sonde` (sonde.magics), on the wrapped
                                   kernel's process tree; cells are the relayed execute requests

A cell made only of these magics (and comments) runs in the wrapper; every other cell, and
completion, inspection, history, is_complete, comms and input requests, goes to the wrapped
kernel, its outputs come back. An interrupt is passed on (SIGINT or the kernel's
interrupt_request, as its kernelspec says). A wrapped kernel that dies is said in one line and
started again by the next cell; the monitor follows it, its data is kept. A restart of the
wrapper (the front end's restart) saves the session (sonde.session.export_session) where the next
wrapper finds it and wraps the same kernel again; its first cell says where.
"""

import json
import os
import sys
import tempfile

KERNEL_NAME = "sonde"
DISPLAY_NAME = "sonde (wrapper)"


# Installation -------------------------------------------------------------------------------
def kernel_json(wrap=None, display_name=DISPLAY_NAME, language="python"):
    argv = [sys.executable, "-m", "sonde.kernel", "-f", "{connection_file}"]
    if wrap:
        argv.append(f"--SondeKernel.auto_wrap_kernel={wrap}")
    return {"argv": argv, "display_name": display_name, "language": language or "python",
            # Interrupts as messages: the wrapper passes them on to the kernel it wraps.
            "interrupt_mode": "message",
            "metadata": {"debugger": False, "sonde": {"wrapped_kernel": wrap}}}


def install_spec(name=KERNEL_NAME, user=False, prefix=None, wrap=None,
                 display_name=DISPLAY_NAME, language="python"):
    """Writes the kernelspec through jupyter_client (its directories: --user the user's data
    directory, --prefix DIR DIR/share/jupyter/kernels, else the system's); returns its path."""
    from jupyter_client.kernelspec import KernelSpecManager

    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "kernel.json"), "w") as f:
            json.dump(kernel_json(wrap, display_name, language), f, indent=1)
        return KernelSpecManager().install_kernel_spec(tmp, kernel_name=name, user=user,
                                                       prefix=prefix)


def install_main(argv):
    import argparse

    p = argparse.ArgumentParser(prog="python3 -m sonde.kernel",
                                description="Installs or removes the sonde wrapper kernel's "
                                            "kernelspec.")
    p.add_argument("action", choices=["install", "uninstall"])
    where = p.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="the user's Jupyter data directory")
    where.add_argument("--sys-prefix", action="store_true",
                       help=f"this Python's prefix ({sys.prefix})")
    where.add_argument("--prefix", default=None, help="DIR/share/jupyter/kernels")
    p.add_argument("--name", default=KERNEL_NAME, help=f"the kernelspec's name ({KERNEL_NAME})")
    p.add_argument("--wrap", default=None, metavar="KERNEL",
                   help="wrap KERNEL when the wrapper starts (no %%wrap_kernel needed)")
    p.add_argument("--display-name", default=None)
    args = p.parse_args(argv)
    if args.action == "uninstall":
        from jupyter_client.kernelspec import KernelSpecManager

        try:
            path = KernelSpecManager().remove_kernel_spec(args.name)
        except KeyError:
            print(f"sonde: error: no kernelspec '{args.name}' is installed", file=sys.stderr)
            return 1
        print(f"sonde: removed the kernelspec {args.name} ({path})")
        return 0
    prefix = sys.prefix if args.sys_prefix else args.prefix
    display = args.display_name or (DISPLAY_NAME if not args.wrap
                                    else f"sonde (wrapper of {args.wrap})")
    try:
        path = install_spec(args.name, user=args.user, prefix=prefix, wrap=args.wrap,
                            display_name=display)
    except OSError as e:
        print(f"sonde: error: cannot install the kernelspec: {e} (--user installs it for you "
              "alone)", file=sys.stderr)
        return 1
    print(f"sonde: installed the kernelspec {args.name} (\"{display}\") in {path}")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("install", "uninstall"):
        return install_main(argv)
    from ipykernel.kernelapp import IPKernelApp

    from .wrapper import SondeKernel

    IPKernelApp.launch_instance(argv=argv, kernel_class=SondeKernel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
