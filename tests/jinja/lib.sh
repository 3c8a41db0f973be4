# What the Jinja oracle scripts (oracle.sh, render_only.sh, survey.sh) share;
# sourced, not run. Sets llama (the llama.cpp checkout: $CONFKV_LLAMACPP_DIR,
# default ${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}/llama.cpp, made by
# ops/scripts/install-llamacpp.sh) and tdir (its models/templates), and exits
# 77 (skip) without the templates or without python3's jinja2.
llama=${CONFKV_LLAMACPP_DIR:-${CONFKV_DEPS_DIR:-$HOME/.cache/confkv}/llama.cpp}
tdir=$llama/models/templates
if [ ! -d "$tdir" ]; then
  echo "SKIP: no llama.cpp templates in $tdir (run ops/scripts/install-llamacpp.sh)"
  exit 77
fi
if ! python3 -c 'import jinja2' 2>/dev/null; then
  echo "SKIP: python3 has no jinja2 (apt-get install python3-jinja2)"
  exit 77
fi
