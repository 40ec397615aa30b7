"""The portable kernels' op, PortableMatMul (parallel_tf/kernels/): op(a) @ op(b) with every sum added in order,
term 0 first, by fused multiply-adds, the work split over the intra-op threads by whole outputs only. Its bits
follow the inputs alone, on every x86-64 CPU with AVX2 and FMA, whatever its caches, cores or thread count. Where
the CPU has AVX-512F, a kernel twice as wide adds the same sums (`instruction_set()`); compat.PORTABLE_KERNEL=avx2 asks
for the AVX2 one there, which is how the tests compare the two.

It is a TensorFlow custom op, compiled once per TensorFlow version with TensorFlow's own flags (tf.sysconfig) and
the system's C++ compiler ($CXX, else g++), about 5 s: by scripts/ensure_venv.sh when the package is installed,
or else by the first process that needs it, the others waiting on a lock. The library lands in
parallel_tf/kernels/build/ (or, where the package is not writable, ~/.cache/parallel_tf), named by a digest of
its sources, flags and TensorFlow version, so an upgrade of any of them builds it anew.
"""

import contextlib
import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from parallel_tf import compat
from parallel_tf.backports import cache
from parallel_tf.compat import tf
from parallel_tf.errors import ConfigError

SOURCES = Path(__file__).resolve().parent.parent / "kernels"
CODE = ("gemm.h", "windows.h", "portable_ops.cc")
# AVX2 and FMA: what the kernel's instructions are, on every x86-64 CPU the promise covers. No -ffast-math, and no
# contraction of the scalar code: each multiply-add is the one the source writes.
ARCHITECTURE = ["-mavx2", "-mfma", "-ffp-contract=off"]
OPTIONS = ["-shared", "-fPIC", "-O2", "-Wno-deprecated-declarations", *ARCHITECTURE]


@cache
def ops():
    """The loaded op library (ops().portable_mat_mul, ...), built first where it is not, its gradient registered."""
    check()
    library = tf.load_op_library(str(build()))
    tf.RegisterGradient("PortableMatMul")(_gradients)
    return library


def check():
    """ConfigError where this machine cannot run the portable kernels: a CPU without AVX2 and FMA (below every
    machine the promise covers), or no compiler and no library built. Cheap: a task's --check_flags makes it."""
    missing = {"avx2", "fma"} - set(compat.cpu()["cpu_extensions"])
    if missing:
        raise ConfigError(
            f"--kernels=portable runs on CPUs with AVX2 and FMA; this one lacks {' and '.join(sorted(missing))}: "
            "choose --kernels=fast"
        )
    asked = os.environ.get(compat.PORTABLE_KERNEL)
    if asked not in (None, "", "avx2"):
        raise ConfigError(f"{compat.PORTABLE_KERNEL}={asked!r} in the environment: avx2, or unset for the CPU's widest")
    if not _compiler() and not any(folder.glob("portable_ops-*.so") for folder in _build_folders() if folder.is_dir()):
        raise ConfigError(
            "--kernels=portable compiles its products' kernel once with a C++ compiler, and this machine has none: "
            "install g++ (Debian: apt-get install g++) or set CXX, or choose --kernels=fast"
        )


@cache
def instruction_set():
    """The kernel the loaded library's products run: "avx512f" or "avx2", as the library itself chose it."""
    ops()
    chosen = ctypes.CDLL(str(build())).parallel_tf_portable_kernel  # the library TensorFlow loaded, the same handle
    chosen.restype = ctypes.c_char_p
    return chosen().decode()


def _compiler():
    return os.environ.get("CXX") or shutil.which("g++")


def build():
    """The path of the built library, compiling it where no process has yet."""
    flags = [*tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags()]
    if not any(flag.startswith(("-std=", "--std=")) for flag in flags):
        # TensorFlow 1.15 says no standard, and its headers want C++14: built as g++'s C++17, absl's string_view is
        # std::string_view, and the library does not load (an undefined symbol)
        flags.append("-std=c++14")
    major, minor = tf.VERSION.split(".")[:2]
    flags.append(f"-DPARALLEL_TF_TENSORFLOW={int(major) * 100 + int(minor)}")  # its API differs by version
    compiler = _compiler()
    digest = hashlib.sha256()
    for name in CODE:
        digest.update((SOURCES / name).read_bytes())
    digest.update(" ".join([*OPTIONS, *flags, tf.VERSION]).encode())
    folder = _build_folder()
    library = folder / f"{_prefix()}{digest.hexdigest()[:16]}.so"
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process compiles; the others find its library when they get here
        if not library.exists():
            _compile(compiler, flags, library)
    return library


def _compile(compiler, flags, library):
    with tempfile.NamedTemporaryFile(dir=library.parent, suffix=".so", delete=False) as partial:
        command = [compiler, *OPTIONS, str(SOURCES / CODE[-1]), "-o", partial.name, *flags]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        os.remove(partial.name)
        errors = [line for line in done.stderr.splitlines() if "error" in line] or done.stderr.splitlines()[-1:]
        raise ConfigError(f"compiling the portable kernel failed ({' '.join(command[:2])} ...): {errors[0]}")
    os.replace(partial.name, library)  # whole or not at all: a process that finds it can load it
    for stale in library.parent.glob(f"{_prefix()}*.so"):  # built from older sources, or by an older patch
        if stale != library:
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()


def _prefix():
    """The start of a library's name: its TensorFlow's version, so two virtualenvs of one checkout (TensorFlow 1.15
    and 2.x) keep a library each, and neither deletes the other's as stale."""
    return f"portable_ops-tf{tf.VERSION}-"


def _build_folders():
    return (SOURCES / "build", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "parallel_tf")


def _build_folder():
    """parallel_tf/kernels/build/, or ~/.cache/parallel_tf where the package's folder cannot be written."""
    for folder in _build_folders():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if os.access(folder, os.W_OK):
                return folder
        except OSError:
            continue
    raise ConfigError(f"cannot write the portable kernel anywhere: {SOURCES / 'build'} nor ~/.cache/parallel_tf")


def _gradients(op, upstream):
    """MatMul's gradients, each a PortableMatMul: for c = op(a) op(b), ∂a and ∂b as TensorFlow's own MatMul has them."""
    a, b = op.inputs
    transpose_a, transpose_b = op.get_attr("transpose_a"), op.get_attr("transpose_b")
    matmul = ops().portable_mat_mul
    if not transpose_a and not transpose_b:
        return matmul(upstream, b, transpose_b=True), matmul(a, upstream, transpose_a=True)
    if not transpose_a and transpose_b:
        return matmul(upstream, b), matmul(upstream, a, transpose_a=True)
    if transpose_a and not transpose_b:
        return matmul(b, upstream, transpose_b=True), matmul(a, upstream)
    return matmul(b, upstream, transpose_a=True, transpose_b=True), matmul(
        upstream, a, transpose_a=True, transpose_b=True
    )


if __name__ == "__main__":  # scripts/ensure_venv.sh: build it as the package is installed
    print(build())
