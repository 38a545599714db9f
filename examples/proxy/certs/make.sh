#!/usr/bin/env bash
# EXAMPLE CERTIFICATES ONLY: their private keys are public, in this repository.
# Never use them for anything but trying the example configurations and tests.
#
# Makes an example CA and, signed by it: a default server certificate for
# localhost (ECDSA P-256), one for api.example.test (RSA 2048), a wildcard
# for *.example.test (ECDSA), a client certificate (CN=example-client, with
# a SPIFFE URI), and a stapled OCSP response for the default certificate.
# Run from this directory: ./make.sh (needs the openssl command).
set -euo pipefail
cd "$(dirname "$0")"
days=3650
ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; }
sign() { # name subject extensions
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days $days \
    -extfile <(printf '%s\n' "$3") -out "$1.pem"
  rm "$1.csr"
}
ec ca
openssl req -x509 -new -key ca.key -subj "/CN=Fulcrum example CA (not for use)" -days $days -out ca.pem \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
ec default
sign default "/CN=localhost" "subjectAltName=DNS:localhost,IP:127.0.0.1"
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out api.key
sign api "/CN=api.example.test" "subjectAltName=DNS:api.example.test"
ec wildcard
sign wildcard "/CN=*.example.test" "subjectAltName=DNS:*.example.test"
ec client
sign client "/CN=example-client/O=Fulcrum examples" \
  "subjectAltName=URI:spiffe://example.test/client
extendedKeyUsage=clientAuth"
# An OCSP response saying the default certificate is good, signed by the CA.
serial=$(openssl x509 -in default.pem -noout -serial | cut -d= -f2)
printf 'V\t%s\t\t%s\tunknown\t/CN=localhost\n' "$(date -u -d "+$days days" +%y%m%d%H%M%SZ)" "$serial" > index.txt
openssl ocsp -issuer ca.pem -cert default.pem -no_nonce -reqout ocsp-req.der
openssl ocsp -index index.txt -CA ca.pem -rsigner ca.pem -rkey ca.key -reqin ocsp-req.der \
  -respout default.ocsp -ndays $days
rm -f index.txt index.txt.attr ocsp-req.der ca.srl
