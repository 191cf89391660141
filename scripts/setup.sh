#!/usr/bin/env bash
# Idempotent set-up for podlet: Debian packages, .venv, Python deps, editable install.
#
#   scripts/setup.sh          # what `make run` needs
#   scripts/setup.sh --test   # plus the oracles/peers used by tests and benchmarks
#   scripts/setup.sh --deps-only [--test]   # stop before installing podlet itself
#
# Every step is skipped when already done, so re-runs take well under a second.
# C++ source edits need no re-run: scikit-build-core's editable.rebuild recompiles
# podlet._core on import. Only pyproject.toml / CMakeLists.txt changes reinstall.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TEST=0
DEPS_ONLY=0
for arg in "$@"; do
  case "$arg" in
    --test) TEST=1 ;;
    --deps-only) DEPS_ONLY=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

say() { echo "[setup] $*"; }

hash_of() {  # hash of stdin
  sha256sum | cut -c1-16
}

# --- 1. Debian packages ---------------------------------------------------------
# cmake and ninja come from pip (newer than Debian's); python3-venv/python3-dev are
# needed by `python3 -m venv` and the pybind11 build on a bare Debian 12.
APT_PKGS=(
  build-essential zlib1g-dev
  libeigen3-dev libtbb-dev libhdf5-dev libjpeg62-turbo-dev libxbyak-dev
  openmpi-bin libopenmpi-dev
  dataset-fashion-mnist
)
# Debian's venv/headers only matter when python3 is Debian's own and lacks them.
if ! python3 -c "import venv, ensurepip, sysconfig, os; assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))" 2>/dev/null; then
  APT_PKGS+=(python3-venv python3-dev)
fi
missing=()
for p in "${APT_PKGS[@]}"; do
  # `dpkg -s` succeeds for removed-but-configured packages too; check the status line.
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
      SUDO=(sudo)
    else
      echo "[setup] missing Debian packages (${missing[*]}) and not root, no sudo" >&2
      exit 1
    fi
  fi
  say "apt-get install ${missing[*]}"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  say "Debian packages present"
fi

# --- 2. virtualenv --------------------------------------------------------------
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
if [[ ! -x "$PY" ]]; then
  say "creating .venv"
  python3 -m venv "$VENV"
fi

# --- 3. Python dependencies -----------------------------------------------------
# pip is configured machine-wide (find-links, local indexes, a constraints file);
# we only pass package specs. torch is pinned exactly: an unpinned torch resolves to
# a CUDA build.
# Keep these in step with pyproject.toml (dependencies and the test extra): the
# editable install runs with --no-build-isolation and would otherwise fetch them itself.
BUILD_DEPS=(scikit-build-core pybind11 numpy ml_dtypes ninja cmake pyyaml tqdm matplotlib)
TEST_DEPS=(pytest pytest-xdist jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 optax==0.2.8 torch==2.13.0
           scikit-learn h5py pillow protobuf scipy mpmath onnx onnxruntime nbclient nbformat ipykernel)

pip_q() {  # pip install, minus the machine config's noise about missing index dirs
  "$PY" -m pip install -q "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

pip_install_stamped() {  # name, specs...
  local name="$1"; shift
  local stamp
  stamp="$VENV/.podlet-deps-$name-$(printf '%s\n' "$@" "$("$PY" -VV)" | hash_of)"
  if [[ -f "$stamp" ]]; then
    say "$name deps up to date"
    return
  fi
  say "pip install ($name): $*"
  pip_q "$@"
  rm -f "$VENV"/.podlet-deps-"$name"-*
  touch "$stamp"
}

pip_install_stamped build "${BUILD_DEPS[@]}"
if ((TEST)); then
  pip_install_stamped test "${TEST_DEPS[@]}"
fi

if ((DEPS_ONLY)); then
  say "done (deps only)"
  exit 0
fi

# --- 4. editable install of podlet ----------------------------------------------
# Reinstall only when the build configuration changes or the install vanished.
# A --test install is a superset of a plain one, so it satisfies a plain run.
EDIT_STAMP="$VENV/.podlet-editable"
cfg_hash="$(cat pyproject.toml CMakeLists.txt | hash_of)"
installed=0
if compgen -G "$VENV/lib/python3*/site-packages/podlet-*.dist-info" >/dev/null; then
  installed=1
fi
need=1
if ((installed)) && [[ -f "$EDIT_STAMP" ]]; then
  read -r s_hash s_mode <"$EDIT_STAMP" || true
  if [[ "${s_hash:-}" == "$cfg_hash" ]] && { ((TEST == 0)) || [[ "${s_mode:-}" == test ]]; }; then
    need=0
  fi
fi
if ((need)); then
  target="."
  mode=plain
  if ((TEST)); then target=".[test]"; mode=test; fi
  say "pip install --no-build-isolation -e $target (compiles podlet._core)"
  rm -f "$EDIT_STAMP"
  pip_q --no-build-isolation -e "$target"
  echo "$cfg_hash $mode" >"$EDIT_STAMP"
else
  say "podlet editable install up to date"
fi
say "done"
