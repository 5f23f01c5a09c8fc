package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/chaos"
	"github.com/dtq/dtq/internal/redistest"
)

func proxied(t *testing.T) (*chaos.Proxy, *redis.Client, *redis.Client) {
	t.Helper()
	srv := redistest.Shared(t)
	p, err := chaos.NewProxy(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	via := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { _ = via.Close() })
	return p, via, srv.Client(t)
}

// A reply cut lets the command run in Redis and loses its reply: the client sees an
// error for a write that happened.
func TestProxyCutOnReply(t *testing.T) {
	t.Parallel()
	p, via, direct := proxied(t)
	ctx := context.Background()
	key := redistest.Prefix(t) + ":k"
	p.CutOnReply(chaos.Contains("SET", key), 1)
	if err := via.Set(ctx, key, "v", 0).Err(); err == nil {
		t.Fatal("SET through a reply cut succeeded; want a connection error")
	}
	if v := direct.Get(ctx, key).Val(); v != "v" {
		t.Fatalf("value %q: the command did not reach Redis", v)
	}
	if p.Armed() != 0 {
		t.Fatalf("armed = %d after the cut", p.Armed())
	}
	if err := via.Set(ctx, key, "w", 0).Err(); err != nil {
		t.Fatalf("next command on a new connection: %v", err)
	}
	if _, _, cuts := p.Stats(); cuts != 1 {
		t.Fatalf("cuts = %d, want 1", cuts)
	}
}

// CutAll drops a blocked read; Refuse keeps Redis unreachable until it is lifted.
func TestProxyCutAllAndRefuse(t *testing.T) {
	t.Parallel()
	p, via, _ := proxied(t)
	ctx := context.Background()
	key := redistest.Prefix(t) + ":list"
	done := make(chan error, 1)
	go func() { done <- via.BLPop(ctx, time.Minute, key).Err() }()
	deadline := time.Now().Add(10 * time.Second)
	for p.CutAll() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the blocked read never connected")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := <-done; err == nil || err == redis.Nil {
		t.Fatalf("blocked read after a cut: %v, want a connection error", err)
	}
	p.Refuse(true)
	if err := via.Ping(ctx).Err(); err == nil {
		t.Fatal("ping through a refusing proxy succeeded")
	}
	p.Refuse(false)
	if err := via.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping after the refusal: %v", err)
	}
}

// Command matches the command a request is, not a word of a script's text.
func TestCommandMatchesTheCommandOnly(t *testing.T) {
	t.Parallel()
	read := "*6\r\n$10\r\nxreadgroup\r\n$5\r\nGROUP\r\n$1\r\ng\r\n$5\r\nBLOCK\r\n$4\r\n1000\r\n$7\r\nSTREAMS\r\n"
	eval := "*3\r\n$4\r\nEVAL\r\n$40\r\nredis.call('XREADGROUP', 'BLOCK', 1)\r\n$1\r\n0\r\n"
	m := chaos.Command("XREADGROUP", "BLOCK")
	if !m([]byte(read)) {
		t.Error("a blocking XREADGROUP did not match")
	}
	if m([]byte(eval)) {
		t.Error("an EVAL whose script names XREADGROUP and BLOCK matched")
	}
	if !chaos.Contains("XREADGROUP", "BLOCK")([]byte(eval)) {
		t.Error("Contains did not match the EVAL: the case is not shown")
	}
}

// A watch names the connection the first matching request came on, and how many
// connections had been accepted by then; later matches change nothing.
func TestProxyWatch(t *testing.T) {
	t.Parallel()
	p, via, _ := proxied(t)
	ctx := context.Background()
	key := redistest.Prefix(t) + ":w"
	s := p.Watch(chaos.Command("GET", key))
	if err := via.Set(ctx, key, "v", 0).Err(); err != nil { // connection 1
		t.Fatal(err)
	}
	select {
	case <-s.Seen():
		t.Fatal("a SET was taken for the watched GET")
	default:
	}
	second := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, PoolSize: 1})
	defer second.Close()
	if err := second.Get(ctx, key).Err(); err != nil { // connection 2
		t.Fatal(err)
	}
	<-s.Seen()
	if s.Conn != 2 || s.Accepted != 2 {
		t.Fatalf("seen on connection %d of %d accepted; want 2 of 2", s.Conn, s.Accepted)
	}
	if err := via.Get(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if s.Conn != 2 {
		t.Fatalf("a later match moved the sighting to connection %d", s.Conn)
	}
}
