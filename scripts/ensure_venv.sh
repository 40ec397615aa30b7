# Sourced by run_local_cluster.sh and run_tests.sh: makes sure $REPO/.venv holds this package
# and its dependencies, installing on first use (or when setup.py changes). TensorFlow comes as
# the [gpu] extra when nvidia-smi works, else [cpu]. Usage: ensure_venv [extra ...]
ensure_venv() {
  local python="${PYTHON:-python3}" tf_extra=cpu extras setup_hash stamp
  if nvidia-smi -L >/dev/null 2>&1; then tf_extra=gpu; fi
  extras=$(IFS=,; echo "$tf_extra${*:+,$*}")
  setup_hash=$(sha256sum <"$REPO/setup.py" | cut -c1-16)
  stamp="$REPO/.venv/.installed-$setup_hash-${extras//,/-}"
  if [ -f "$stamp" ]; then byte_compile; return 0; fi
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "error: $python (Python 3.10 or newer, as TensorFlow 2.21 needs) is needed; set PYTHON=/path/to/python3" >&2
    return 2
  fi
  echo "[setup] installing parallel_tf[$extras] into $REPO/.venv (first run only; TensorFlow is a large download)"
  [ -x "$REPO/.venv/bin/python" ] || "$python" -m venv "$REPO/.venv" || return 1
  local log="$REPO/.venv/install.log"
  if ! { "$REPO/.venv/bin/python" -m pip install --upgrade pip &&
         "$REPO/.venv/bin/python" -m pip install -e "$REPO[$extras]"; } >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "error: installing parallel_tf[$extras] failed; full log: $log" >&2
    return 1
  fi
  find "$REPO/.venv" -maxdepth 1 -name '.installed-*' ! -name ".installed-$setup_hash-*" -delete
  # The portable kernels' op, compiled once with TensorFlow's flags (parallel_tf/graph/portable_kernel.py); without
  # a C++ compiler only --kernels=fast runs, and a portable run says so in one line.
  if ! "$REPO/.venv/bin/python" -m parallel_tf.graph.portable_kernel >>"$log" 2>&1; then
    echo "[setup] the portable kernels could not be compiled (see $log): only --kernels=fast will run" >&2
  fi
  touch "$stamp"
  byte_compile
  echo "[setup] done"
}

# An editable install leaves the package's own modules uncompiled, and where PYTHONDONTWRITEBYTECODE is set
# (many CI images and containers) every process of a run compiled them again: about 0.1 s a task, 0.1 of a
# refusal's 0.4 s. Compiled here as pip compiles what it installs; only what changed since, in 0.04 s. Only a
# saving: where the checkout cannot be written, nothing is compiled and nothing fails.
byte_compile() {
  "$REPO/.venv/bin/python" -m compileall -q "$REPO/parallel_tf" "$REPO/recipes" >/dev/null 2>&1 || true
}
