# shellcheck shell=bash
# The local NATS cluster's locks (deploy/nats/nats.conf; docs/OPERATIONS.md "Broker security"):
# its TLS certificates and its roles' passwords, per stack dir. Sourced by scripts/stack after
# lib/common.sh.

# The broker is locked (deploy/nats/nats.conf): TLS on clients and routes, users per role.
NATS_TLS="$PMW_NATS_DIR/tls"
NATS_ROLES=(push edge operator route)

# A local CA and one server certificate (IP SAN 127.0.0.1, DNS localhost; server and client
# use: routes present it to each other), made once per stack dir with openssl. Clients check
# the server against ca.pem (PMW_NATS_CA).
nats_tls() {
  [ -s "$NATS_TLS/server.pem" ] && [ -s "$NATS_TLS/ca.pem" ] && return 0
  mkdir -p "$NATS_TLS"
  chmod 0700 "$NATS_TLS"
  log "nats: making a local CA and server certificate in $NATS_TLS"
  (
    cd "$NATS_TLS"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
      -subj "/CN=pmw local stack CA" -keyout ca.key -out ca.pem \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
      -keyout server.key -out server.csr
    printf '%s\n' 'subjectAltName=IP:127.0.0.1,DNS:localhost' 'extendedKeyUsage=serverAuth,clientAuth' \
      'keyUsage=critical,digitalSignature' 'basicConstraints=CA:FALSE' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile server.ext -out server.pem
    rm -f server.csr server.ext ca.srl
    chmod 0600 ca.key server.key
    chmod 0644 ca.pem server.pem
  ) >>"$PMW_STACK_DIR/log/nats-tls.log" 2>&1 || { log_tail "$PMW_STACK_DIR/log/nats-tls.log"; die "nats: openssl failed"; }
}

# The password of role $1 (push, edge, operator, route): made once per stack dir (random hex,
# mode 0600), never a production password.
nats_password() {
  local f="$PMW_NATS_DIR/passwords"
  if [ ! -s "$f" ]; then
    mkdir -p "$PMW_NATS_DIR"
    (umask 077 && for r in "${NATS_ROLES[@]}"; do printf '%s %s\n' "$r" "$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"; done >"$f.tmp" && mv "$f.tmp" "$f")
  fi
  awk -v r="$1" '$1 == r { print $2 }' "$f"
}
