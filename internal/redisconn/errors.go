package redisconn

import (
	"context"
	"crypto/tls"
	"errors"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Class is what the outcome of a Redis call says about Redis.
type Class int

const (
	// Answered: no error, a nil reply, or an error reply about the command itself (a
	// key of the wrong type, a missing group, a script's own error): Redis serves.
	Answered Class = iota
	// Unreachable: no answer (connection refused or reset, a timeout, DNS), or an
	// answer that Redis cannot serve now (LOADING, BUSY, MASTERDOWN, CLUSTERDOWN,
	// TRYAGAIN, READONLY, MISCONF, OOM, NOREPLICAS, max clients): waiting may heal it.
	Unreachable
	// Refused: Redis refuses this client in a way no wait heals: a wrong password or
	// user, an ACL permission missing, a database number out of range, a command the
	// server lacks, a TLS certificate one side does not trust.
	Refused
	// Local: the caller gave up (its context was cancelled), the client is closed or
	// its pool is exhausted: nothing about Redis.
	Local
)

func (c Class) String() string {
	switch c {
	case Answered:
		return "answered"
	case Unreachable:
		return "unreachable"
	case Refused:
		return "refused"
	default:
		return "local"
	}
}

// Classify sorts the error of a Redis call. It is the one place dtq matches Redis
// errors for what they say about the server: by type where go-redis has one, by the
// reply's prefix otherwise.
func Classify(err error) Class {
	switch {
	case err == nil, errors.Is(err, redis.Nil), errors.Is(err, redis.TxFailedErr):
		return Answered
	case errors.Is(err, context.Canceled), errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted):
		return Local
	}
	if RefusedCause(err) != "" {
		return Refused
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return Unreachable // network errors, timeouts (context.DeadlineExceeded among them)
	}
	if redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsMasterDownError(err) || redis.IsMaxClientsError(err) ||
		redis.IsOOMError(err) || redis.IsNoReplicasError(err) || replyHasPrefix(re, "BUSY ", "MISCONF ") {
		return Unreachable
	}
	return Answered
}

// NoReply reports whether err failed a command short of Redis's answer (the network,
// a timeout, the caller's context): neither nil, nor a nil reply, nor an error reply.
// A command that failed so may have run, its reply lost.
func NoReply(err error) bool {
	var re redis.Error
	return err != nil && !errors.As(err, &re)
}

// RefusedCause says what to fix when err is a refusal no wait heals ("" when it is
// not one), in one short line that names no secret.
func RefusedCause(err error) string {
	cause, _ := refusal(err)
	return cause
}

// refusal is RefusedCause, and whether the refusal is of one command only (an ACL
// permission, a command the server lacks) rather than of the client.
func refusal(err error) (cause string, perCommand bool) {
	if err == nil {
		return "", false
	}
	var cv *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	var alert tls.AlertError
	switch {
	case errors.As(err, &cv):
		return "TLS: the server's certificate is not trusted (DTQ_REDIS_CA_FILE, the host of DTQ_REDIS_URL)", false
	case errors.As(err, &rh):
		return "TLS: the server does not speak TLS (rediss:// to a plain port)", false
	case errors.As(err, &alert):
		return "TLS: the server refused the handshake (client certificate, TLS version)", false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return "", false
	}
	switch {
	case redis.IsAuthError(err) || replyHasPrefix(re, "ERR invalid password", "ERR Client sent AUTH, but no password is set",
		"ERR AUTH <password> called without any password configured"):
		return "authentication failed: wrong user or password in DTQ_REDIS_URL", false
	case redis.IsPermissionError(err) || replyHasPrefix(re, "ERR The user executing the script can't"):
		return "the ACL user lacks a permission dtq needs (docs/reliability.md has the ACL line)", true
	case replyHasPrefix(re, "ERR DB index is out of range", "ERR invalid DB index"):
		return "the database number of DTQ_REDIS_URL does not exist on this server", false
	case replyHasPrefix(re, "ERR This instance has cluster support disabled"):
		return "DTQ_REDIS_URL is redis+cluster:// but the server is not a cluster node", false
	case replyHasPrefix(re, "ERR unknown command", "ERR unknown subcommand"):
		return "the server lacks a command dtq needs (an older Redis, or a renamed or disabled command)", true
	}
	return "", false
}

func replyHasPrefix(re redis.Error, prefixes ...string) bool {
	msg := re.Error()
	for _, p := range prefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// Scrub returns s with the password of rawURL (if any, and if it is long enough not
// to match by chance) replaced: for texts built from Redis errors, which should never
// hold one, as a second line of defence.
func Scrub(s, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		return s
	}
	if p, ok := u.User.Password(); ok && len(p) >= 3 {
		s = strings.ReplaceAll(s, p, "xxxxx")
	}
	return s
}
