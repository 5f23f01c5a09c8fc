package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a redis-server in sentinel mode monitoring one master.
type Sentinel struct {
	*Server
	Master     *Server
	MasterName string
}

// URL is the redis+sentinel:// URL through which clients find the master.
func (s *Sentinel) URL() string {
	return "redis+sentinel://" + s.Addr() + "?master_name=" + s.MasterName
}

// StartSentinel starts a sentinel monitoring master under name (quorum 1), with extra
// lines appended to its configuration (a later "sentinel down-after-milliseconds …"
// overrides the default of 5 s), and waits until it reports the master's address. It
// stops when t ends.
func StartSentinel(t testing.TB, master *Server, name string, extra ...string) *Sentinel {
	t.Helper()
	dir := t.TempDir()
	port, err := freePort()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\nsentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 5000\n",
		port, dir, filepath.Join(dir, "redis.log"), name, master.Port, name)
	for _, line := range extra {
		text += line + "\n"
	}
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s := &Server{Port: port, Dir: dir, args: []string{conf, "--sentinel"}}
	if err := s.launch(); err != nil {
		t.Fatalf("redistest: sentinel: %v", err)
	}
	t.Cleanup(s.Stop)
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
	defer sc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		addr, err := sc.GetMasterAddrByName(context.Background(), name).Result()
		if err == nil && len(addr) == 2 && addr[1] == fmt.Sprint(master.Port) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel does not report master %s: %v %v", name, addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the sentinel with a deadline
	}
	return &Sentinel{Server: s, Master: master, MasterName: name}
}
