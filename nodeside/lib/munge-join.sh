# shellcheck shell=bash
# munge key hand-over through /fsx with no plaintext key on shared storage.
#   joiner:    one-time EC P-256 key + self-signed cert (kept in a local 0700 dir), cert
#              published as requests/<instance-id>.pem;
#   responder: any node whose key matches the cluster's fingerprint encrypts the key
#              to that cert (CMS, AES-256 envelope) into responses/<instance-id>.cms,
#              published with ln so two responders never clobber each other;
#   joiner:    decrypts, installs munge.key (owner munge, 0400), deletes request,
#              response and its private key.
# Only root on a node that mounts FSX_ROOT (0700 root) can ask. Sourced; needs openssl.

MJ_CN=gpu-cluster-munge-join

# mj_request PRIVDIR REQDIR ID: create (or reuse) the one-time key pair; publish the cert.
mj_request() {
  local priv=$1 req=$2 id=$3
  install -d -m 0700 "$priv"
  if [[ ! -s $priv/join.key || ! -s $priv/join.pem ]]; then
    # P-256 (ECDH in CMS) has the strength of RSA-3072 [NIST-800-57], but the key pair is
    # made in milliseconds instead of 0.3-1 s (a node's boot waits for it).
    (umask 077 && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=$MJ_CN-$id" \
      -keyout "$priv/join.key" -out "$priv/join.pem" 2>/dev/null)
  fi
  if ! cmp -s "$priv/join.pem" "$req/$id.pem"; then
    (umask 077 && cp "$priv/join.pem" "$req/.$id.pem.tmp")
    mv -f "$req/.$id.pem.tmp" "$req/$id.pem"
  fi
}

# mj_answer KEYFILE REQDIR RESPDIR [MIN_AGE_S]: answer every pending request at least
# MIN_AGE_S old; print how many this call answered.
mj_answer() {
  local key=$1 req=$2 resp=$3 min_age=${4:-0} f id tmp n=0 now subject
  now=$(date +%s)
  for f in "$req"/*.pem; do
    [[ -f $f ]] || continue
    id=${f##*/}
    id=${id%.pem}
    [[ $id =~ ^[A-Za-z0-9_-]+$ && ! -e $resp/$id.cms ]] || continue
    ((min_age == 0 || now - $(stat -c %Y "$f") >= min_age)) || continue
    # A valid, unexpired cert made for this very request id, nothing else. One openssl
    # call, without the system CA bundle: OpenSSL 3's x509 parses it at every start
    # (about 30 ms) though nothing is verified against it [OPENSSL-16871]; that cost
    # made 1024 joiners wait over a minute on the controller (bench/bench_munge_join.py).
    subject=$(SSL_CERT_FILE=/dev/null openssl x509 -in "$f" -noout -subject -checkend 0 2>/dev/null) || continue
    grep -q "CN *= *$MJ_CN-$id\$" <<<"$subject" || continue
    tmp=$(mktemp "$resp/.$id.XXXXXX")
    if openssl cms -encrypt -aes256 -binary -outform DER -in "$key" -out "$tmp" "$f" 2>/dev/null &&
      ln "$tmp" "$resp/$id.cms" 2>/dev/null; then
      n=$((n + 1))
    fi
    rm -f "$tmp"
  done
  printf '%s\n' "$n"
}

# mj_pending REQDIR RESPDIR: MJ_PENDING = the ids of requests without a response, in
# glob order (no subprocess: the controller's responder checks it five times a second).
mj_pending() {
  local f id
  MJ_PENDING=""
  for f in "$1"/*.pem; do
    [[ -f $f ]] || continue
    id=${f##*/}
    id=${id%.pem}
    [[ -e $2/$id.cms ]] || MJ_PENDING+="$id "
  done
}

# mj_collect PRIVDIR REQDIR RESPDIR ID DEST OWNER: decrypt the response, install DEST
# (OWNER user:group, 0400), clean up. Fails (and drops an undecryptable response, so
# it is answered again) while there is nothing usable yet.
mj_collect() {
  local priv=$1 req=$2 resp=$3 id=$4 dest=$5 owner=$6 tmp
  [[ -s $resp/$id.cms ]] || return 1
  tmp=$(mktemp "$priv/key.XXXXXX")
  if ! openssl cms -decrypt -binary -inform DER -in "$resp/$id.cms" -recip "$priv/join.pem" \
    -inkey "$priv/join.key" -out "$tmp" 2>/dev/null || (($(stat -c %s "$tmp") < 32)); then
    rm -f "$tmp" "$resp/$id.cms"
    return 1
  fi
  install -o "${owner%%:*}" -g "${owner##*:}" -m 0400 "$tmp" "$dest.new"
  mv -f "$dest.new" "$dest"
  rm -f "$tmp" "$req/$id.pem" "$resp/$id.cms"
  rm -rf "$priv"
}

# mj_gc REQDIR RESPDIR: drop requests and responses of joiners that gave up (a joiner
# waits MUNGE_JOIN_TIMEOUT, far less than a day), and stale temp files.
mj_gc() {
  find "$1" "$2" -maxdepth 1 -type f \( -name '*.pem' -o -name '*.cms' \) -mmin +1440 -delete 2>/dev/null || true
  find "$1" "$2" -maxdepth 1 -type f -name '.*' -mmin +60 -delete 2>/dev/null || true
}

# key_fingerprint FILE: sha256 of the key; published so nodes can tell the cluster's
# key from the random one the munge package generates at install.
# Empty (not a failure) when there is no key yet: the caller then joins.
key_fingerprint() { if [[ -r $1 ]]; then sha256sum "$1" | cut -d' ' -f1; fi; }
