#!/usr/bin/env bash
# make_certs.sh DIR: test certificates made with openssl: ca.pem (a CA), server.pem/.key (for
# 127.0.0.1 and localhost, from that CA), client.pem/.key (from that CA) and
# rogue-client.pem/.key (from another CA, rogue-ca.pem, which the coordinator does not trust).
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
ca() {  # name
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -subj "/CN=localsgd test $1" -days 2 -out "$1.pem"
}
leaf() {  # name, CA name, extensions
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$1" -out "$1.csr"
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 2 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
}
ca ca
ca rogue-ca
leaf server ca "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
leaf client ca "extendedKeyUsage=clientAuth"
leaf rogue-client rogue-ca "extendedKeyUsage=clientAuth"
