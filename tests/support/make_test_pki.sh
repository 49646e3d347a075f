#!/usr/bin/env bash
# Makes the certificates the tests of brokers across nodes use, in DIR (created if missing):
#   ca.crt            the CA every broker trusts (--tls-ca), ca.key its key
#   NAME.crt/.key     for each NAME given (default: broker-a broker-b): signed by ca, common name
#                     NAME, DNS names NAME and localhost, IP 127.0.0.1, for servers and clients
#   other-ca.crt      a second CA; intruder.crt/.key: common name broker-b, signed by it
#   expired.crt/.key  common name broker-b, signed by ca, valid 2020-01-01 to 2020-01-02 only
# EC P-256 keys (fast). Needs the openssl command (Debian: openssl).
# Usage: tests/support/make_test_pki.sh DIR [NAME...]
set -euo pipefail
dir=${1:?usage: make_test_pki.sh DIR [NAME...]}
shift
names=("$@")
[ "${#names[@]}" -gt 0 ] || names=(broker-a broker-b)
mkdir -p "$dir"
cd "$dir"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; chmod 600 "$1"; }

# A CA: KEY CERT SUBJECT
make_ca() {
  key "$1"
  openssl req -x509 -new -key "$1" -out "$2" -days 3650 -subj "/CN=$3" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}

# The extensions of a broker's certificate: NAME
extensions() {
  cat <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:$1,DNS:localhost,IP:127.0.0.1
EXT
}

# A broker's certificate: NAME CA_KEY CA_CERT OUT_BASENAME
make_leaf() {
  key "$4.key"
  openssl req -new -key "$4.key" -out "$4.csr" -subj "/CN=$1"
  openssl x509 -req -in "$4.csr" -CA "$3" -CAkey "$2" -CAcreateserial -out "$4.crt" -days 825 \
    -extfile <(extensions "$1") 2>/dev/null
  rm -f "$4.csr"
}

make_ca ca.key ca.crt "tensorbroker test CA"
make_ca other-ca.key other-ca.crt "another CA"
for name in "${names[@]}"; do make_leaf "$name" ca.key ca.crt "$name"; done
make_leaf broker-b other-ca.key other-ca.crt intruder

# Expired: `openssl ca` is the one that sets both dates.
mkdir -p ca-db
: > ca-db/index.txt
echo 1000 > ca-db/serial
cat > ca-db/ca.cnf <<CNF
[ca]
default_ca = test
[test]
database = ca-db/index.txt
serial = ca-db/serial
new_certs_dir = ca-db
default_md = sha256
policy = anything
copy_extensions = none
[anything]
commonName = supplied
CNF
key expired.key
openssl req -new -key expired.key -out expired.csr -subj "/CN=broker-b"
openssl ca -batch -config ca-db/ca.cnf -cert ca.crt -keyfile ca.key -in expired.csr \
  -out expired.crt -startdate 20200101000000Z -enddate 20200102000000Z -notext \
  -extfile <(extensions broker-b) 2>/dev/null
rm -rf expired.csr ca-db
