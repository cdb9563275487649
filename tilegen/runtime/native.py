"""Native code: the one mechanism that builds the runtime's C++ source (csrc/) into a per-user
cache and loads it.

- The cache is $TILEGEN_CACHE_DIR, else $XDG_CACHE_HOME/tilegen, else ~/.cache/tilegen. It must be
  a folder the user owns that nobody else can write to; a built file must be the user's too, and
  match the digest recorded when it was built (a truncated or foreign file is built again, never
  loaded).
- A build holds an exclusive lock (flock) on a lock file beside its output: concurrent processes
  wait for one build, and a builder that dies releases the lock with it (and, on Linux, takes its
  compiler with it). The compiler writes into a scratch folder in the cache, and the result is
  renamed into place.
- The compiler runs with warnings on (-Wall -Wextra); torch's and Python's headers are system
  headers, so only this project's code is held to that.
"""

import ctypes
import fcntl
import glob
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile

SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")


class BuildError(OSError):
    """The native code could not be built or loaded here (the message says why)."""


def cache_dir():
    """Where built native code is kept: $TILEGEN_CACHE_DIR, else $XDG_CACHE_HOME/tilegen, else
    ~/.cache/tilegen."""
    explicit = os.environ.get("TILEGEN_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tilegen")


def private_dir(path):
    """`path`, created mode 700 where missing; BuildError where it is not a folder of this user's
    that only they can write to."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise BuildError(f"{path} is not a folder")
    if info.st_uid != os.getuid():
        raise BuildError(f"{path} belongs to another user; refusing to load code from it")
    if info.st_mode & 0o022:
        raise BuildError(f"{path} can be written by other users; refusing to load code from it "
                         "(chmod go-w, or set TILEGEN_CACHE_DIR)")
    return path


def compiler():
    found = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if found is None:
        raise BuildError("no C++ compiler (c++, g++ or clang++) on PATH")
    return found


def compile_command(source, output):
    """The command that builds the extension `source` into `output`, against this torch and Python."""
    import torch
    import torch.utils.cpp_extension as cpp

    libraries = cpp.library_paths()[0]
    system = [*cpp.include_paths(), sysconfig.get_paths()["include"]]
    return [compiler(), "-O2", "-shared", "-fPIC", "-std=c++17", "-Wall", "-Wextra",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            *[flag for path in system for flag in ("-isystem", path)],
            source, "-o", output, f"-L{libraries}", "-ltorch", "-ltorch_cpu", "-lc10", "-ltorch_python", "-ldl",
            f"-Wl,-rpath,{libraries}"]


def library_path(name):
    """Where the extension `name` (csrc/<name>.cpp) is built: one file per source, torch and Python."""
    import torch

    with open(os.path.join(SOURCE_DIR, f"{name}.cpp"), "rb") as handle:
        source = handle.read()
    identity = source + f"{torch.__version__}{torch.__file__}{sys.version}{sys.platform}".encode()
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return os.path.join(cache_dir(), f"{name}-{hashlib.sha256(identity).hexdigest()[:16]}{suffix}")


_PR_SET_PDEATHSIG = 1


def _dying_with_the_builder():
    """A preexec function for the compiler: on Linux, ask the kernel to kill it when the thread
    that started it dies, so that a killed builder leaves no compiler running on (into a scratch
    folder nobody removes until the next build). Elsewhere None: the compiler finishes alone."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child
    except (OSError, AttributeError):
        return None
    builder = os.getpid()

    def die_with_the_builder():
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != builder:  # the builder died before the request: do not outlive it
            os._exit(1)
    return die_with_the_builder


def _digest(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _verified(path):
    """Whether `path` is a build of ours: this user's file, writable by nobody else, whose digest
    is the one recorded when it was built."""
    try:
        info = os.lstat(path)
        with open(path + ".sha256") as handle:
            recorded = handle.read().strip()
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        return False
    return _digest(path) == recorded


def build(name):
    """The path of the extension `name`, built first where the cache lacks a verified copy.
    Returns (path, the compiler's warnings: '' for a clean build or one found built)."""
    path = library_path(name)
    private_dir(os.path.dirname(path))
    if _verified(path):
        return path, ""
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when this process ends, whatever way it ends
        if _verified(path):  # another process built it while this one waited
            return path, ""
        # Scratch folders of this file's builds that a killed builder left: none is live while
        # the lock is held.
        for left in glob.glob(os.path.join(os.path.dirname(path), f".build-{os.path.basename(path)}-*")):
            shutil.rmtree(left, ignore_errors=True)
        scratch = tempfile.mkdtemp(prefix=f".build-{os.path.basename(path)}-", dir=os.path.dirname(path))
        try:
            built = os.path.join(scratch, os.path.basename(path))
            command = compile_command(os.path.join(SOURCE_DIR, f"{name}.cpp"), built)
            # A builder killed meanwhile takes its compiler with it (on Linux); its scratch folder
            # is removed by the next build.
            try:
                done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                      preexec_fn=_dying_with_the_builder())
            except OSError as exc:  # (CXX naming no program, or one that cannot run)
                raise BuildError(f"the C++ compiler {command[0]!r} cannot be run: {exc.strerror or exc}") from None
            if done.returncode != 0:
                first = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr[-300:])
                raise BuildError(f"building {name} failed: {first.strip()[:300]}")
            with open(built + ".sha256", "w") as record:
                record.write(_digest(built))
            os.replace(built + ".sha256", path + ".sha256")
            os.replace(built, path)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return path, done.stderr


def load(name):
    """The extension module `name`, built where needed; BuildError where it cannot be had."""
    path, _ = build(name)
    module_name = f"_tilegen_{name}"
    loader = importlib.machinery.ExtensionFileLoader(module_name, path)
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as exc:
        raise BuildError(f"loading {path} failed: {exc}") from None
    return module
