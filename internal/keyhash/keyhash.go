// Package keyhash bounds the bytes a client's key costs wherever it is
// kept. A key of at most Short bytes is kept as it is; a longer key is
// kept as a short prefix of it, then "…", then a keyed digest of the whole
// key: HMAC-SHA-256 under a 32-byte secret, all 256 bits, in unpadded
// base64url (43 characters). A kept long key is at most MaxKept bytes,
// whatever the key's length.
//
// The kept form is one-to-one up to the digest's collisions: a kept short
// key is at most Short bytes and a kept long key is longer than Short, so
// no short key is ever taken for a long one; two long keys get the same
// kept form only if their digests collide. For n distinct long keys that
// happens with probability at most n²/2^257 when the secret is random and
// unknown (NewSecret), and finding one such pair with the secret known
// (DeriveSecret) is finding a collision of HMAC-SHA-256, about 2^128 work.
package keyhash

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"unicode/utf8"
)

const (
	// Short is the longest key kept as it is.
	Short = 64
	// prefixLen is the most bytes of a long key kept before the digest;
	// the prefix is cut back to a UTF-8 boundary, by at most 3 bytes.
	prefixLen = 32
	sep       = "…"
	digestLen = 43 // base64url of 32 bytes, unpadded
	// MaxKept is the longest kept form of any key.
	MaxKept = prefixLen + len(sep) + digestLen
)

// Secret keys the digest of long keys.
type Secret [32]byte

// NewSecret returns a random secret, for a structure that lives in one
// process.
func NewSecret() *Secret {
	s := new(Secret)
	_, _ = rand.Read(s[:]) // crypto/rand.Read never fails (Go 1.24)
	return s
}

// DeriveSecret returns the secret every instance agrees on from the same
// parts (a store's prefix, a limiter's parameters): SHA-256 over a domain
// string and each part, length-prefixed so that parts cannot run into each
// other. It is not secret from whoever knows the parts; distinctness then
// rests on HMAC-SHA-256's collision resistance (see the package doc).
func DeriveSecret(parts ...string) *Secret {
	h := sha256.New()
	h.Write([]byte("ratelimit/keyhash v1"))
	var n [binary.MaxVarintLen64]byte
	for _, p := range parts {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(p)))])
		h.Write([]byte(p))
	}
	s := new(Secret)
	h.Sum(s[:0])
	return s
}

// Keep returns key's kept form: key itself if it is at most Short bytes,
// else its prefix, "…" and its digest (at most MaxKept bytes). A short key
// costs one comparison and no allocation.
func (s *Secret) Keep(key string) string {
	if len(key) <= Short {
		return key
	}
	return s.long(key)
}

// Long reports whether key is longer than Short, so that Keep changes it.
func Long(key string) bool { return len(key) > Short }

func (s *Secret) long(key string) string {
	m := hmac.New(sha256.New, s[:])
	var buf [512]byte // fed in pieces: no copy of a long key on the heap
	for rest := key; rest != ""; {
		n := copy(buf[:], rest)
		m.Write(buf[:n])
		rest = rest[n:]
	}
	var d [sha256.Size]byte
	m.Sum(d[:0])
	p := prefixLen
	for p > prefixLen-utf8.UTFMax && !utf8.RuneStart(key[p]) {
		p--
	}
	b := make([]byte, 0, MaxKept)
	b = append(b, key[:p]...)
	b = append(b, sep...)
	b = base64.RawURLEncoding.AppendEncode(b, d[:])
	return string(b)
}
