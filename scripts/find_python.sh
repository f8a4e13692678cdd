# Sourced by the scripts that prepare a peer's venv (setup_sglang_env.sh, setup_tunix_env.sh,
# setup_browsergym_env.sh): each peer needs a Python of its own range, found the same way.
#
#   find_python MIN MAX [CANDIDATE ...]   prints the first interpreter whose version is within MIN..MAX
#                                         (e.g. 3.11 3.13): the candidates, then pyenv's and the PATH's;
#                                         returns 1 if none is
find_python() {
    local lo="$1" hi="$2" c
    shift 2
    for c in "$@" "$HOME"/.pyenv/versions/3.*/bin/python /root/.pyenv/versions/3.*/bin/python \
             python3.13 python3.12 python3.11 python3.10 python3; do
        [ -n "$c" ] || continue
        command -v "$c" >/dev/null 2>&1 || [ -x "$c" ] || continue
        if "$c" -c "import sys; sys.exit(0 if (${lo/./,}) <= sys.version_info[:2] <= (${hi/./,}) else 1)" >/dev/null 2>&1; then
            echo "$c"
            return 0
        fi
    done
    return 1
}
