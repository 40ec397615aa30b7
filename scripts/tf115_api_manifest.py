"""Writes the manifest of TensorFlow 1.15's `tf.compat.v1` API that tests/test_tf115_api.py checks the
package against: every public name of the namespace and, for the functions and classes defined in
Python, their parameters. TensorFlow 1.15 needs Python 3.7, so it is not imported: its wheel is read
as a zip. The generated `_api/v1/compat/v1/**/__init__.py` files say which name comes from which
module (`from tensorflow.python.ops.nn_ops import relu`), and that module's source gives the `def`.

    python scripts/tf115_api_manifest.py [--wheel=tensorflow_cpu-1.15.0-....whl] [--out=tests/data/tf115_api.json]

Without --wheel it downloads the wheel (110 MB) with pip into a temporary directory:
    pip download --no-deps --only-binary=:all: --python-version 3.7 --implementation cp
        --platform manylinux2010_x86_64 tensorflow-cpu==1.15.0
"""

import argparse
import ast
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import zipfile

from parallel_tf.backports import removeprefix

NAMESPACE = "tensorflow_core/_api/v1/compat/v1/"
IMPORT = re.compile(r"^from (tensorflow[\w.]*) import (\w+)(?: as (\w+))?$", re.MULTILINE)
COMMAND = "python scripts/tf115_api_manifest.py"


def download_wheel(directory):
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.7"]
        + ["--implementation", "cp", "--platform", "manylinux2010_x86_64", "tensorflow-cpu==1.15.0", "-d", directory],
        check=True,
    )
    (wheel,) = pathlib.Path(directory).glob("tensorflow_cpu-1.15.0-*.whl")
    return wheel


def manifest(wheel):
    """{"namespace": {dotted name: "module" | parameters | None}}; parameters are the names a call may
    give, with "*" for *args and "**" for **kwargs; None where no Python `def` says (a C++ binding, a
    constant, a name bound by assignment)."""
    with zipfile.ZipFile(wheel) as archive:
        sources = {}

        def parse(module):
            if module not in sources:
                path = "tensorflow_core/" + removeprefix(module, "tensorflow.").replace(".", "/")
                for candidate in (path + ".py", path + "/__init__.py"):
                    if candidate in archive.namelist():
                        sources[module] = ast.parse(archive.read(candidate))
                        break
                else:
                    sources[module] = None
            return sources[module]

        names = {}
        for path in sorted(n for n in archive.namelist() if n.startswith(NAMESPACE) and n.endswith("__init__.py")):
            prefix = path[len(NAMESPACE) : -len("__init__.py")].replace("/", ".")
            if prefix:
                names[prefix.rstrip(".")] = "module"
            for module, name, alias in IMPORT.findall(archive.read(path).decode()):
                public = prefix + (alias or name)
                if module.startswith("tensorflow._api.v1.compat.v1"):
                    names.setdefault(public, "module")
                else:
                    names[public] = _parameters(parse(module), name)
    return {"tensorflow": "1.15.0", "made_by": COMMAND, "namespace": "tf.compat.v1", "names": names}


def _parameters(tree, name):
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return _arguments(node.args)
        if isinstance(node, ast.ClassDef) and node.name == name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    return _arguments(item.args)[1:]  # less self
            return ["*", "**"]  # no __init__ of its own here: a base class's, unknown
    return None


def _arguments(args):
    names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    return names + (["*"] if args.vararg else []) + (["**"] if args.kwarg else [])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", help="the tensorflow-cpu 1.15.0 wheel; downloaded with pip if not given")
    parser.add_argument("--out", default="tests/data/tf115_api.json")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        wheel = options.wheel or download_wheel(directory)
        result = manifest(wheel)
    names = result.pop("names")
    with open(options.out, "w") as out:  # one name a line, so a new manifest reads as a diff
        out.write(json.dumps(result, sort_keys=True)[:-1] + ', "names": {\n')
        out.write(",\n".join(f"{json.dumps(name)}: {json.dumps(names[name])}" for name in sorted(names)))
        out.write("\n}}\n")
    print(f"{options.out}: {len(names)} names of tf.compat.v1 in TensorFlow 1.15.0")


if __name__ == "__main__":
    main()
