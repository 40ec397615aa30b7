"""scripts/ensure_venv.sh, which both of the README's commands run first: its byte-compiling of the package is only
a saving, so it compiles what compiles and never stops the command (set -e) over a module that does not."""

import subprocess
import sys

from conftest import REPO


def test_byte_compiling_compiles_what_it_can_and_never_stops_the_scripts(tmp_path):
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (tmp_path / "parallel_tf").mkdir()
    (tmp_path / "parallel_tf" / "good.py").write_text("ANSWER = 42\n")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "broken.py").write_text("def broken(:\n")  # a recipe being edited
    script = f'set -euo pipefail; REPO="{tmp_path}"; source "{REPO}/scripts/ensure_venv.sh"; byte_compile; echo on'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "on\n", "")
    assert [path.name for path in (tmp_path / "parallel_tf" / "__pycache__").iterdir()] == [
        f"good.{sys.implementation.cache_tag}.pyc"
    ]
