# Sourced by run_local_cluster.sh and run_tests.sh: makes sure the virtualenv of the TensorFlow line asked for holds
# this package and its dependencies, installing on first use (or when setup.py changes), and sets VENV to it:
# $REPO/.venv for TensorFlow 2 (the default), $REPO/.venv-tf1.15 for PARALLEL_TF_TENSORFLOW=1.15, on a Python 3.7
# (PYTHON if given, else python3.7 on PATH, else pyenv's). TensorFlow 2 comes as the [gpu] extra when nvidia-smi
# works, else [cpu]; 1.15 as [tf115], one package for both. Usage: ensure_venv [extra ...]
ensure_venv() {
  local line="${PARALLEL_TF_TENSORFLOW:-2}" python tf_extra=cpu extras setup_hash stamp
  case "$line" in
    2) VENV="$REPO/.venv"; python="${PYTHON:-python3}"
       if nvidia-smi -L >/dev/null 2>&1; then tf_extra=gpu; fi ;;
    1.15) VENV="$REPO/.venv-tf1.15"; tf_extra=tf115; python="${PYTHON:-$(python37)}" || return 2 ;;
    *) echo "error: PARALLEL_TF_TENSORFLOW=$line: give 2 (the default) or 1.15" >&2; return 2 ;;
  esac
  extras=$(IFS=,; echo "$tf_extra${*:+,$*}")
  setup_hash=$(sha256sum <"$REPO/setup.py" | cut -c1-16)
  stamp="$VENV/.installed-$setup_hash-${extras//,/-}"
  if [ -f "$stamp" ]; then byte_compile; return 0; fi
  if [ "$line" = 2 ] && ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "error: $python (Python 3.10 or newer, as TensorFlow 2.21 needs) is needed; set PYTHON=/path/to/python3" >&2
    return 2
  fi
  echo "[setup] installing parallel_tf[$extras] into $VENV (first run only; TensorFlow is a large download)"
  [ -x "$VENV/bin/python" ] || "$python" -m venv "$VENV" || return 1
  local log="$VENV/install.log"
  if ! { "$VENV/bin/python" -m pip install --upgrade pip &&
         "$VENV/bin/python" -m pip install -e "$REPO[$extras]"; } >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "error: installing parallel_tf[$extras] failed; full log: $log" >&2
    return 1
  fi
  find "$VENV" -maxdepth 1 -name '.installed-*' ! -name ".installed-$setup_hash-*" -delete
  # The portable kernels' op, compiled once with TensorFlow's flags (parallel_tf/graph/portable_kernel.py); without
  # a C++ compiler only --kernels=fast runs, and a portable run says so in one line.
  if ! "$VENV/bin/python" -m parallel_tf.graph.portable_kernel >>"$log" 2>&1; then
    echo "[setup] the portable kernels could not be compiled (see $log): only --kernels=fast will run" >&2
  fi
  touch "$stamp"
  byte_compile
  echo "[setup] done"
}

# A Python 3.7, as TensorFlow 1.15 needs: python3.7 on PATH, else pyenv's newest 3.7 (whose python3.7 shim on PATH
# answers only with PYENV_VERSION set); else one line saying how to get one.
python37() {
  local version
  if python3.7 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 7))' 2>/dev/null; then
    command -v python3.7
    return 0
  fi
  version=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.7\.[0-9]+$' | sort -V | tail -n 1)
  if [ -n "$version" ] && [ -x "$(pyenv prefix "$version")/bin/python3.7" ]; then
    echo "$(pyenv prefix "$version")/bin/python3.7"
    return 0
  fi
  echo "error: PARALLEL_TF_TENSORFLOW=1.15 needs a Python 3.7 (TensorFlow 1.15's), and none was found: set" \
    "PYTHON=/path/to/python3.7, or install one (pyenv install 3.7.16)" >&2
  return 2
}

# An editable install leaves the package's own modules uncompiled, and where PYTHONDONTWRITEBYTECODE is set
# (many CI images and containers) every process of a run compiled them again: about 0.1 s a task, 0.1 of a
# refusal's 0.4 s. Compiled here as pip compiles what it installs; only what changed since, in 0.04 s. Only a
# saving: where the checkout cannot be written, nothing is compiled and nothing fails.
byte_compile() {
  "${VENV:-$REPO/.venv}/bin/python" -m compileall -q "$REPO/parallel_tf" "$REPO/recipes" >/dev/null 2>&1 || true
}
