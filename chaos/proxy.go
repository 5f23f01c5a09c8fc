package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy between workers and Redis that injects network faults: it drops
// every connection, drops a connection exactly when the reply to a chosen command comes
// back (the command ran in Redis, the client never hears of it: "mid-script"), delays
// traffic, and refuses new connections.
//
// It is written here rather than taken from a fault-injection library (toxiproxy is the
// well-kept one) because the fault that matters most is protocol-aware — cut when the
// reply to one particular request arrives, after Redis applied it — which byte-level
// toxics cannot target, and because it is small enough to read in one sitting.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  map[*pconn]struct{}
	rules  []*replyRule
	seen   []*Sighting
	closed bool
	wg     sync.WaitGroup

	delay    atomic.Int64 // ns added before forwarding each chunk, both ways
	refuse   atomic.Bool
	accepted atomic.Int64
	refused  atomic.Int64
	cuts     atomic.Int64
}

type replyRule struct {
	match func(req []byte) bool
	left  int
}

// Sighting is where the first request matching a Watch came: on the Conn-th connection
// the proxy accepted (1 for the first), when Accepted connections had been accepted.
type Sighting struct {
	match          func(req []byte) bool
	Conn, Accepted int64
	seen           chan struct{}
}

// Seen is closed once a matching request has passed.
func (s *Sighting) Seen() <-chan struct{} { return s.seen }

type pconn struct {
	n              int64 // 1 for the first connection accepted
	client, server net.Conn
	once           sync.Once
	cutOnReply     atomic.Bool // the next reply from Redis is dropped with the connection
}

func (c *pconn) close() {
	c.once.Do(func() {
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

// NewProxy listens on a free port of 127.0.0.1 and forwards to target (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*pconn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			p.refused.Add(1)
			_ = c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			p.refused.Add(1)
			_ = c.Close()
			continue
		}
		pc := &pconn{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			pc.close()
			return
		}
		p.conns[pc] = struct{}{}
		p.wg.Add(2)
		pc.n = p.accepted.Add(1)
		p.mu.Unlock()
		go p.pipe(pc, true)
		go p.pipe(pc, false)
	}
}

// pipe copies one direction of pc until either side closes.
func (p *Proxy) pipe(pc *pconn, up bool) {
	defer p.wg.Done()
	defer func() {
		pc.close()
		p.mu.Lock()
		delete(p.conns, pc)
		p.mu.Unlock()
	}()
	src, dst := pc.server, pc.client
	if up {
		src, dst = pc.client, pc.server
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delay.Load()); d > 0 {
				t := time.NewTimer(d)
				<-t.C
			}
			if up {
				p.sight(pc, buf[:n])
				if p.armed(buf[:n]) {
					pc.cutOnReply.Store(true)
				}
			} else if pc.cutOnReply.Load() {
				p.cuts.Add(1)
				return // the reply is dropped with the connection
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// armed reports whether req matches a rule with cuts left, and uses one.
func (p *Proxy) armed(req []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.left > 0 && r.match(req) {
			r.left--
			return true
		}
	}
	return false
}

// Watch records where the first request matching match comes from, from now on.
func (p *Proxy) Watch(match func(req []byte) bool) *Sighting {
	s := &Sighting{match: match, seen: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, s)
	return s
}

// sight fills in the watches req is the first match of.
func (p *Proxy) sight(pc *pconn, req []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; i < len(p.seen); i++ {
		if s := p.seen[i]; s.match(req) {
			s.Conn, s.Accepted = pc.n, p.accepted.Load()
			close(s.seen)
			p.seen = append(p.seen[:i], p.seen[i+1:]...)
			i--
		}
	}
}

// CutOnReply arms n cuts: each of the next n requests matching match is forwarded to
// Redis, and its connection is dropped when the reply comes back, before the client
// reads it.
func (p *Proxy) CutOnReply(match func(req []byte) bool, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &replyRule{match: match, left: n})
}

// Disarm drops every reply cut not yet triggered.
func (p *Proxy) Disarm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// Armed is how many reply cuts are still waiting for their request.
func (p *Proxy) Armed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.rules {
		n += r.left
	}
	return n
}

// Contains matches requests whose bytes contain every one of parts, ignoring case (RESP
// carries command names and arguments verbatim; go-redis sends names in lower case).
func Contains(parts ...string) func([]byte) bool {
	return func(req []byte) bool {
		low := bytes.ToLower(req)
		for _, s := range parts {
			if !bytes.Contains(low, bytes.ToLower([]byte(s))) {
				return false
			}
		}
		return true
	}
}

// Command matches a request that is the command name (its first word, not a word in
// a script's text sent with EVAL) and holds each of parts, case-insensitively.
func Command(name string, parts ...string) func([]byte) bool {
	head := []byte(fmt.Sprintf("$%d\r\n%s\r\n", len(name), strings.ToLower(name)))
	rest := Contains(parts...)
	return func(req []byte) bool {
		i := bytes.Index(req, []byte("\r\n"))
		return i >= 0 && req[0] == '*' && bytes.HasPrefix(bytes.ToLower(req[i+2:]), head) && rest(req)
	}
}

// CutAll drops every open connection and returns how many it dropped.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	list := make([]*pconn, 0, len(p.conns))
	for c := range p.conns {
		list = append(list, c)
	}
	p.mu.Unlock()
	for _, c := range list {
		c.close()
	}
	p.cuts.Add(int64(len(list)))
	return len(list)
}

// SetDelay delays every chunk, both ways, by d (0: none).
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Refuse makes the proxy close new connections at once (Redis unreachable) while on.
func (p *Proxy) Refuse(on bool) { p.refuse.Store(on) }

// Stats returns connections accepted, refused, and cut so far.
func (p *Proxy) Stats() (accepted, refused, cuts int64) {
	return p.accepted.Load(), p.refused.Load(), p.cuts.Load()
}

// Close stops listening, drops every connection and waits for its goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

var _ io.Closer = (*Proxy)(nil)
