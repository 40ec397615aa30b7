"""The package uses only what TensorFlow 1.15's `tf.compat.v1` has, checked against tests/data/tf115_api.json
(every public name of that namespace in the real 1.15 wheel, with the parameters of those defined in
Python; made by scripts/tf115_api_manifest.py): the 2.x suite's fast check, where 1.15 is not installed; the
1.15 tier runs the package on 1.15 itself (PARALLEL_TF_TENSORFLOW=1.15 ./run_tests.sh, in .ci/run).

How `tf` is followed: a module that does `from parallel_tf.compat import tf` gets tf.compat.v1 under
that name. Each attribute chain rooted at it (`tf.train.Server`, `tf.GraphKeys.LOCAL_VARIABLES`) must
reach, through names of modules, a name the manifest has (what follows is that object's own
attribute, not looked up); a call of exactly such a name may pass only keywords its 1.15 signature
takes. Not followed: attributes of the objects TensorFlow returns (`optimizer.apply_gradients`), and
names passed around as values. The marked fallbacks, which 1.15 users go without: the bench's peers
(tools/tf_strategy_task.py, TensorFlow 2's own strategies through compat.tensorflow_v2()).
"""

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NAMES = json.loads((ROOT / "tests" / "data" / "tf115_api.json").read_text())["names"]
FALLBACKS = {"parallel_tf/tools/tf_strategy_task.py"}  # TF 2 only, by design (docs/architecture.md)


def problems(source):
    """Where `source` uses `tf` (parallel_tf.compat's) beyond TensorFlow 1.15's tf.compat.v1, one line each."""
    tree = ast.parse(source)
    if not any(
        isinstance(node, ast.ImportFrom)
        and node.module == "parallel_tf.compat"
        and "tf" in [a.name for a in node.names]
        for node in tree.body
    ):
        return []
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    found = []
    for node in ast.walk(tree):
        chain = _chain(node) if isinstance(node, ast.Attribute) and id(node) not in inner else None
        if chain and _resolve(chain) is None:
            found.append(f"line {node.lineno}: tf.{'.'.join(chain)}: not in TensorFlow 1.15's tf.compat.v1")
        parts = _chain(node.func) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None
        if parts:
            name = ".".join(parts)
            parameters = NAMES.get(name) if _resolve(parts) == name else None
            if isinstance(parameters, list) and "**" not in parameters:
                for keyword in node.keywords:
                    if keyword.arg and keyword.arg not in parameters:
                        found.append(f"line {node.lineno}: tf.{name}({keyword.arg}=...): 1.15 takes no {keyword.arg}")
    return sorted(found, key=lambda line: int(line.split(":")[0].split()[1]))


def _chain(node):
    """['train', 'Server'] for tf.train.Server; None for a chain not rooted at the name `tf`."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    return parts if isinstance(node, ast.Name) and node.id == "tf" else None


def _resolve(parts):
    """The name of the first object on the chain that 1.15 has (modules lead to it), or None."""
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if name not in NAMES:
            return None
        if NAMES[name] != "module":
            return name
    return ".".join(parts)


def sources():
    return sorted(
        path.relative_to(ROOT).as_posix()
        for folder in ("parallel_tf", "recipes")
        for path in (ROOT / folder).rglob("*.py")
    )


@pytest.mark.parametrize("path", [p for p in sources() if p not in FALLBACKS])
def test_the_package_uses_only_tensorflow_1_15_api(path):
    assert problems((ROOT / path).read_text()) == []


def test_a_name_or_keyword_that_1_15_lacks_is_found():
    """tf.nn.gelu came in TensorFlow 2.4; 1.15's tf.nn.relu takes (features, name); its Server takes protocol."""
    source = "\n".join(
        [
            "from parallel_tf.compat import tf",
            "tf.nn.gelu(x)",
            "tf.nn.relu(x, alpha=0.1)",
            "tf.train.Server(spec, protocol='grpc')",
            "tf.GraphKeys.LOCAL_VARIABLES",
            "other.nn.gelu(x)",
        ]
    )
    assert problems(source) == [
        "line 2: tf.nn.gelu: not in TensorFlow 1.15's tf.compat.v1",
        "line 3: tf.nn.relu(alpha=...): 1.15 takes no alpha",
    ]


def test_a_module_without_parallel_tfs_tf_is_not_read():
    assert problems("import tensorflow as tf\ntf.nn.gelu(x)\n") == []
