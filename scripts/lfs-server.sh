#!/usr/bin/env bash
# The Git LFS server the tests push parts to and fetch them from: giftless
# (PyPI, Datopian's LFS server, local-disk store), in a virtual environment
# of its own at $WTXT_LFS_SERVER (default target/lfs-server), with the
# versions it was tested with. giftless declares no dependencies in its
# wheel, so they are named here; PyJWT stays below 2.10, which refuses the
# anonymous tokens giftless signs for its upload URLs.
#
#   scripts/lfs-server.sh install             create it unless it is there
#   scripts/lfs-server.sh serve STORE PORT    serve on 127.0.0.1:PORT, anyone
#                                             reading and writing, objects in
#                                             STORE/ORG/REPO/OID
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${WTXT_LFS_SERVER:-$PWD/target/lfs-server}
case "${1:-}" in
  serve)
    store=$(realpath "$2")
    config=$store.giftless.yaml
    cat > "$config" <<YAML
AUTH_PROVIDERS:
  - giftless.auth.allow_anon:read_write
LEGACY_ENDPOINTS: false
TRANSFER_ADAPTERS:
  basic:
    factory: giftless.transfer.basic_streaming:factory
    options:
      storage_class: giftless.storage.local_storage:LocalStorage
      storage_options:
        path: $store
PRE_AUTHORIZED_ACTION_PROVIDER:
  factory: giftless.auth.jwt:factory
  options:
    algorithm: HS256
    private_key: loopback-tests-only-0123456789abcdef
    default_lifetime: 3600
MIDDLEWARE:
  - class: lfs_chunks:Chunked
YAML
    PYTHONPATH=$PWD/scripts GIFTLESS_CONFIG_FILE=$config exec "$venv/bin/flask" \
      --app giftless.wsgi_entrypoint run --host 127.0.0.1 --port "$3"
    ;;
  install)
    if [ -x "$venv/bin/flask" ] && "$venv/bin/python" -c "import giftless.app" 2>/dev/null; then
      exit 0
    fi
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q giftless==0.6.2 Flask==3.1.3 Flask-Classful==0.16.0 flask-marshmallow==1.5.0 \
      marshmallow==4.4.0 webargs==8.7.1 figcan==0.0.4 PyYAML==6.0.4 python-dotenv==1.2.4 \
      python-dateutil==4.0.0 cachetools==8.0.2 "PyJWT==2.9.0" typing_extensions==4.16.0 requests==2.34.2 \
      Werkzeug==3.1.9
    ;;
  *)
    echo "usage: scripts/lfs-server.sh install | serve STORE PORT" >&2
    exit 2
    ;;
esac
